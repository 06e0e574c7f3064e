"""Op definitions: each op's builder, shape rule and registration in one place.
Kernels live in ``towerflow.backends``; gradients join them in the autodiff stage."""
