"""A character-level model of the Zen of Python (the text of the ``this``
module, shipped with every CPython), sampled at temperatures 0.2, 0.6 and 1.0
with ``tf.random.categorical(logits / temperature, 1)`` (SEED_PROGRAMS P8).

The model sees the previous CONTEXT characters one-hot encoded, then a dense
hidden layer, then logits over the characters of the text. Seeded: the same
``--seed`` gives the same samples.

    towerflow train text_sample [--steps 1500] [--seed 0]
"""

import codecs
import contextlib
import io

import numpy as np

import towerflow as tf

CONTEXT, HIDDEN, BATCH_SIZE, STEPS = 8, 256, 64, 1500
TEMPERATURES = (0.2, 0.6, 1.0)
SAMPLE_LENGTH = 200


def zen_of_python():
    """The text ``import this`` prints (stored rot13-encoded in the module)."""
    with contextlib.redirect_stdout(io.StringIO()):     # importing it prints it
        import this
    return codecs.decode(this.s, "rot13")


class TextSampleRecipe:
    name = "text_sample"
    kind = "script"
    flags = ("steps", "batch_size", "log_device_placement")

    def run(self, args):
        """Train, then sample; returns final_loss, steps, samples {"0.2": text, ...}."""
        text = zen_of_python()
        vocab = sorted(set(text))
        codes = np.array([vocab.index(char) for char in text])
        steps, batch_size = args.steps or STEPS, args.batch_size or BATCH_SIZE
        with tf.Graph().as_default(), tf.device("/cpu:0"):     # too small for a GPU
            tf.set_random_seed(args.seed)
            model = self._model(len(vocab))
            config = tf.ConfigProto(log_device_placement=args.log_device_placement)
            with tf.Session(config=config) as sess:
                sess.run(tf.global_variables_initializer())
                rng = np.random.default_rng(args.seed)
                for _ in range(steps):
                    starts = rng.integers(0, len(codes) - CONTEXT, size=batch_size)
                    _, loss = sess.run(model["train"], feed_dict=self._feed(
                        model, codes, starts, len(vocab)))
                samples = self._sample(sess, model, codes[:CONTEXT], vocab)
        if not args.quiet:
            for temperature, sample in samples.items():
                print(f"--- temperature {temperature} ---\n{sample}")
        return {"devices": ["/cpu:0"], "steps": steps, "final_loss": float(loss),
                "samples": samples, "text_chars": len(text), "vocabulary": len(vocab)}

    def _model(self, vocab_size):
        context = tf.placeholder(tf.float32, [None, CONTEXT * vocab_size], name="context")
        next_char = tf.placeholder(tf.int32, [None], name="next_char")
        temperature = tf.placeholder(tf.float32, [None, 1], name="temperature")  # per row
        hidden = tf.layers.dense(context, HIDDEN, activation=tf.nn.tanh)
        logits = tf.layers.dense(hidden, vocab_size)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=next_char, logits=logits))
        train_op = tf.train.AdamOptimizer(0.003).minimize(loss)
        return {"context": context, "next_char": next_char, "temperature": temperature,
                "train": [train_op, loss],
                "sample": tf.random.categorical(logits / temperature, 1)}

    def _feed(self, model, codes, starts, vocab_size):
        windows = codes[starts[:, None] + np.arange(CONTEXT)]
        return {model["context"]: one_hot(windows, vocab_size),
                model["next_char"]: codes[starts + CONTEXT]}

    def _sample(self, sess, model, prompt, vocab):
        """{temperature: SAMPLE_LENGTH characters following ``prompt`` (codes)}, drawn
        one character at a time, one row per temperature."""
        windows = np.array([prompt] * len(TEMPERATURES))
        temperatures = np.array(TEMPERATURES, np.float32)[:, None]
        drawn = []
        for _ in range(SAMPLE_LENGTH):
            codes = sess.run(model["sample"], feed_dict={
                model["context"]: one_hot(windows, len(vocab)),
                model["temperature"]: temperatures})
            windows = np.concatenate([windows[:, 1:], codes], axis=1)
            drawn.append(codes[:, 0])
        return {str(temperature): "".join(vocab[code] for code in row)
                for temperature, row in zip(TEMPERATURES, np.transpose(drawn))}

    def summary(self, result):
        return (f"text_sample: loss {result['final_loss']:.4f} after {result['steps']} "
                f"steps, {result['wall_seconds']:.1f} s")


def one_hot(windows, vocab_size):
    """[batch, CONTEXT] codes -> float32 [batch, CONTEXT * vocab_size]."""
    encoded = np.zeros(windows.shape + (vocab_size,), np.float32)
    np.put_along_axis(encoded, windows[..., None], 1.0, axis=-1)
    return encoded.reshape(len(windows), -1)


RECIPE = TextSampleRecipe()
