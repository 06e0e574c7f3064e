"""``towerflow train --accumulate K``: an update (a *step*: the global step,
the learning-rate schedule, ``--steps``, checkpoints and the curve count
them) is K micro-batches of ``--batch-size``. An epoch's micro-batches are
grouped K at a time from its start; its last update takes what is left (so
it may hold fewer micro-batches, and its last micro-batch fewer examples),
exactly as an epoch of batches K times larger ends. A run stops and
checkpoints only between updates, when the accumulators are zero, so
``--resume`` goes on exactly::

    updates = Updates(accumulate=2, micro_batches_per_epoch=45)
    updates.per_epoch                           # 23
    updates.ends_update(micro_batch=44)         # True: the epoch's last
"""


class Updates:
    """How an epoch's micro-batches make updates (see the module docstring)."""

    def __init__(self, accumulate, micro_batches_per_epoch):
        self.accumulate, self.micro_batches_per_epoch = accumulate, micro_batches_per_epoch

    @property
    def per_epoch(self):
        """Updates in one epoch (the last may hold fewer micro-batches)."""
        return -(-self.micro_batches_per_epoch // self.accumulate)

    def ends_update(self, micro_batch):
        """Whether micro-batch ``micro_batch`` (counted from the epoch's start) is
        the last of its update: every K-th, and the epoch's last."""
        return (micro_batch + 1) % self.accumulate == 0 or \
            micro_batch + 1 == self.micro_batches_per_epoch

    def done(self, pipeline_state):
        """Updates done by a pipeline at ``pipeline_state`` (taken between updates)."""
        micro_batches = pipeline_state["position"] // pipeline_state["batch_size"]
        return pipeline_state["epoch"] * self.per_epoch + -(-micro_batches // self.accumulate)


class UpdateMeans:
    """An update's loss and accuracy: its micro-batches' values weighted by their
    examples, so they equal one batch's of them all (a lone micro-batch's
    values are kept as they are, bit for bit)."""

    def __init__(self):
        self.values, self.samples = [], 0

    def add(self, loss, accuracy, samples):
        self.values.append((loss, accuracy, samples))
        self.samples += samples

    def means(self):
        """(loss, accuracy) over the update's examples."""
        if len(self.values) == 1:
            return self.values[0][:2]
        total = max(self.samples, 1)
        return tuple(sum(float(value[which]) * value[2] for value in self.values) / total
                     for which in (0, 1))


def run_micro_batch(sess, model, images, labels, ends_update, trace_options):
    """One micro-batch: the step's train op at an update's end (the all-reduce
    and the apply), else its accumulate op. Returns its loss and accuracy."""
    step = model.step
    op = step.train_op if ends_update else step.accumulate_op
    feed = {model.images: images, model.labels: labels, model.training: True}
    _, loss, accuracy = sess.run([op, step.loss, step.metrics["accuracy"]], feed_dict=feed,
                                 **trace_options)
    return loss, accuracy
