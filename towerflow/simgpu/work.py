"""Work on the simulated GPUs: one kernel or copy (:class:`Work`), run now on
the current stream or recorded into the graph that stream captures
(:func:`submit`), and the guard on the memory a captured graph replays into
(:func:`seal` at the end of a capture, :func:`check_seal` before each
replay): a CUDA graph holds raw memory, not arrays, so memory freed or handed
out again since the capture is refused as another user's data.
"""

from . import clock as clocks
from . import state


class Work:
    """One kernel or copy: ``run()`` does it in NumPy; ``reads``/``writes`` are
    the blocks it touches."""

    __slots__ = ("host_reads", "name", "reads", "run", "writes")

    def __init__(self, name, run, reads=(), writes=(), host_reads=()):
        self.name, self.run = name, run
        self.reads, self.writes, self.host_reads = reads, writes, host_reads

    def execute(self, stream):
        clock = stream._issue()
        where = f"'{self.name}'"
        for block in self.reads:
            block.check_read(clock, stream.key, where)
            # NOTE: a block the work also writes may be written only (an out=,
            # a fill, a kernel's output): only pure reads must find it written.
            if block not in self.writes:
                block.check_initialized(stream.key, where)
        for block in self.writes:
            block.check_write(clock, stream.key, where)
        result = self.run()
        for block in self.reads:
            block.note_read(stream.key, stream.seq)
        for block in self.writes:
            block.note_write(stream.key, stream.seq)
        for pinned in self.host_reads:
            pinned.note_device_read(stream.key, stream.seq)
        return result


def submit(work):
    """Run ``work`` on the current stream now, or record it if that stream
    captures. Returns whether it ran."""
    world = state.world()
    stream = world.current_stream()
    graph = world.capture_of(stream)
    if graph is None:
        work.execute(stream)
        return True
    graph._add(replayable(work, graph), stream)
    return False


def replayable(work, graph):
    """``work`` as a node of ``graph``. Like a CUDA graph, the node holds raw
    memory (``node.blocks``), not the arrays (whose closures here hold only
    NumPy views); :func:`seal` and :func:`check_seal` guard that memory."""
    def node(stream):
        work.execute(stream)
    node.blocks = {id(block): block for block in (*work.reads, *work.writes)}
    return node


def seal(graph):
    """At the end of a capture: note the state of every block the graph uses."""
    blocks = {}
    for node in graph.nodes:
        blocks.update(getattr(node, "blocks", {}))
    owned = {key: _owned_by(block, graph) for key, block in blocks.items()}
    graph.seal = [(block, owned[key], _stamp(block, owned[key]))
                  for key, block in blocks.items()]


def check_seal(graph, stream):
    """Before a replay: refuse memory from outside the graph's own pool that
    was freed since the capture (its array dropped), graph-pool memory the
    pool has handed out again since, and memory given back to the GPU (its
    pool dropped or emptied): on a GPU each means another user's data."""
    for block, owned, stamp in getattr(graph, "seal", ()):
        why = _stale(block, owned, stamp)
        if why:
            raise clocks.RaceError(
                f"a graph replay on {stream.key} uses GPU {block.device_id} memory at "
                f"{block.ptr:#x} ({block.nbytes} bytes) that {why}")


def _stale(block, owned, stamp):
    if block.memory.released:
        return ("was given back to the GPU since the capture (the graph's memory pool "
                "was dropped or emptied: keep the pool alive while the graph may replay)")
    if _stamp(block, owned) == stamp:
        return None
    if owned:
        return ("its pool has handed out again since the capture (keep the graph's "
                "arrays alive while it may replay)")
    return ("was freed since the capture (a graph holds no reference to its arrays: keep "
            "them alive while the graph may replay)")


def _owned_by(block, graph):
    pool = block.pool
    return pool is not None and pool.graph_owner is graph


def _stamp(block, owned):
    """What changes when the block's memory is reused: for the graph's own
    pool, any hand-out overlapping it (the pool may have split or merged the
    chunk since); else the chunk's frees and hand-outs."""
    if not owned:
        return block.generation
    end = block.offset + block.nbytes
    log = block.memory.handout_log or ()
    return sum(1 for start, stop in log if start < end and block.offset < stop)
