"""Examples that ship with towerflow, laid out as in TensorFlow 1.x so that
``from towerflow.examples.tutorials.mnist import input_data`` works."""
