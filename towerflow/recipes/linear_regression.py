"""SEED_PROGRAMS P5: fit y = w * x + b to seven points by plain gradient
descent, pinned to the CPU. 100,000 steps reach the least-squares fit
w = -0.09749, b = 9.72423, loss 15.58217 in seconds.

    towerflow train linear_regression [--steps 100000] [--log-device-placement]
"""

import time

import towerflow as tf

X_DATA = [1, 23, 4, 5, 7, 5, 7]
Y_DATA = [3, 5, 7, 9, 11, 13, 15]


class LinearRegressionRecipe:
    name = "linear_regression"
    kind = "script"
    flags = ("steps", "log_device_placement")
    default_steps = 100_000

    def run(self, args):
        """Train; returns w, b, final_loss, steps, wall_seconds, devices."""
        steps = self.default_steps if args.steps is None else args.steps
        with tf.Graph().as_default():
            with tf.device("/device:cpu:0"):
                w = tf.Variable(0.0, name="weight")
                b = tf.Variable(0.0, name="bias")
                x = tf.placeholder(dtype=tf.float32, shape=[None])
                out = tf.placeholder(dtype=tf.float32, shape=[None])
                y = w * x + b
            loss = tf.reduce_mean(tf.square(y - out))
            train_op = tf.train.GradientDescentOptimizer(learning_rate=0.01).minimize(loss)
            config = tf.ConfigProto(log_device_placement=args.log_device_placement)
            with tf.Session(config=config) as sess:
                return self._train(sess, train_op, (loss, w, b), {x: X_DATA, out: Y_DATA}, steps)

    def _train(self, sess, train_op, fetches, feed, steps):
        tf.global_variables_initializer().run(session=sess)
        loss_val, w_val, b_val = sess.run(fetches, feed_dict=feed)
        first_loss, start = loss_val, time.perf_counter()
        for _ in range(steps):
            _, loss_val, w_val, b_val = sess.run([train_op, *fetches], feed_dict=feed)
        # NOTE: as in P5, the loss fetched with train_op is the one before the last update.
        return {"devices": ["/cpu:0"], "steps": steps, "w": float(w_val), "b": float(b_val),
                "first_loss": float(first_loss), "final_loss": float(loss_val),
                "wall_seconds": time.perf_counter() - start}

    def summary(self, result):
        return (f"linear_regression: w = {result['w']:.5f}, b = {result['b']:.5f}, "
                f"loss {result['final_loss']:.5f} after {result['steps']} steps, "
                f"{result['wall_seconds']:.1f} s")


RECIPE = LinearRegressionRecipe()
