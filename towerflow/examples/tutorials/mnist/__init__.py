"""The MNIST tutorial's reader: ``from towerflow.examples.tutorials.mnist import input_data``.

Nothing is imported here, so importing the package stays cheap.
"""
