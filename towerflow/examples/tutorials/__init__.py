"""TensorFlow 1.x's tutorial helpers (``tensorflow.examples.tutorials``)."""
