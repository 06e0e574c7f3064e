"""``tf.contrib.layers.optimize_loss``: loss, global step, learning rate and
optimizer in; one train tensor out (the loss, computed after the update)::

    train_op = tf.contrib.layers.optimize_loss(loss, tf.train.get_or_create_global_step(),
                                               learning_rate=0.1, optimizer='Adam',
                                               clip_gradients=5.0)
    loss_value = sess.run(train_op, feed_dict=...)

The optimizer is a name (``OPTIMIZER_CLS_NAMES``), an ``Optimizer`` subclass
taking the learning rate, an instance, or a function of the learning rate,
as in TF 1.15, whose checks and messages these are.
"""

from ... import train
from ...graph import core
from ...graph.core import GraphKeys, Tensor
from ...ops import (
    array_ops,
    clip_ops,
    constant_ops,
    init_ops,
    random_ops,
    variable_scope,
)
from ...train.optimizer import Optimizer
from .. import missing, summary


def _ftrl(learning_rate):
    raise missing.no_such_name("tf.train.FtrlOptimizer")


OPTIMIZER_CLS_NAMES = {
    "Adagrad": train.AdagradOptimizer,
    "Adam": train.AdamOptimizer,
    "Ftrl": _ftrl,
    "Momentum": lambda learning_rate: train.MomentumOptimizer(learning_rate, momentum=0.9),
    "RMSProp": train.RMSPropOptimizer,
    "SGD": train.GradientDescentOptimizer,
}

OPTIMIZER_SUMMARIES = ["learning_rate", "loss", "gradients", "gradient_norm",
                       "global_gradient_norm"]


def optimize_loss(loss, global_step, learning_rate, optimizer, gradient_noise_scale=None,
                  gradient_multipliers=None, clip_gradients=None, learning_rate_decay_fn=None,
                  update_ops=None, variables=None, name=None, summaries=None,
                  colocate_gradients_with_ops=False, increment_global_step=True):
    """One training step of ``optimizer`` on ``loss``; returns ``loss`` made to
    run after the update (and after ``update_ops``, default UPDATE_OPS)."""
    loss = constant_ops.convert_to_tensor(loss)
    _assert_scalar(loss)
    if global_step is None:
        global_step = train.get_global_step()
    with variable_scope.variable_scope(name, "OptimizeLoss", [loss, global_step]):
        loss = _after_update_ops(loss, update_ops)
        summaries = _checked_summaries(summaries)
        lr = _learning_rate(learning_rate, learning_rate_decay_fn, global_step, summaries)
        opt = _optimizer(optimizer, lr, learning_rate)
        if variables is None:
            variables = _trainable_variables()
        gradients = opt.compute_gradients(
            loss, variables, colocate_gradients_with_ops=colocate_gradients_with_ops)
        gradients = _adjusted(gradients, gradient_noise_scale, gradient_multipliers)
        if "global_gradient_norm" in summaries or "gradient_norm" in summaries:
            summary.scalar("global_norm/gradient_norm", _global_norm(gradients))
        gradients = _clipped(gradients, clip_gradients)
        _summarize(loss, gradients, clip_gradients, summaries)
        update = opt.apply_gradients(
            gradients, global_step=global_step if increment_global_step else None,
            name="train")
        with core.get_default_graph().control_dependencies([update]):
            return array_ops.identity(loss)


def _assert_scalar(loss):
    if loss.shape.ndims not in (None, 0):
        raise ValueError(f"Expected scalar shape for {loss.name}, saw shape: {loss.shape}.")


def _trainable_variables():
    return core.get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES)


def _after_update_ops(loss, update_ops):
    if update_ops is None:
        update_ops = core.get_default_graph().get_collection(GraphKeys.UPDATE_OPS)
    if not update_ops:
        return loss
    with core.get_default_graph().control_dependencies(list(update_ops)):
        return array_ops.identity(loss)


def _checked_summaries(summaries):
    if summaries is None:
        return ["loss", "learning_rate", "global_gradient_norm"]
    for each in summaries:
        if each not in OPTIMIZER_SUMMARIES:
            raise ValueError(f"Summaries should be one of [{', '.join(OPTIMIZER_SUMMARIES)}], "
                             f"you provided {each}.")
    return summaries


def _learning_rate(learning_rate, decay_fn, global_step, summaries):
    """A scalar tensor, a float made a 'learning_rate' variable, or None."""
    if learning_rate is None:
        return None
    if isinstance(learning_rate, Tensor) and learning_rate.shape.ndims == 0:
        lr = learning_rate
    elif isinstance(learning_rate, float):
        if learning_rate < 0.0:
            raise ValueError(f"Invalid learning_rate {learning_rate}.")
        lr = variable_scope.get_variable(
            "learning_rate", [], trainable=False,
            initializer=init_ops.constant_initializer(learning_rate))
    else:
        raise ValueError("Learning rate should be 0d Tensor or float. "
                         f"Got {learning_rate} of type {type(learning_rate)}")
    if decay_fn is not None:
        if global_step is None:
            raise ValueError("global_step is required for learning_rate_decay_fn.")
        lr = decay_fn(lr, global_step)
        if "learning_rate" in summaries:
            summary.scalar("learning_rate", lr)
    return lr


def _optimizer(optimizer, lr, learning_rate):
    if isinstance(optimizer, str):
        if lr is None:
            raise ValueError("Learning rate is None, but should be specified if optimizer "
                             f"is string ({optimizer}).")
        if optimizer not in OPTIMIZER_CLS_NAMES:
            raise ValueError(f"Optimizer name should be one of "
                             f"[{', '.join(OPTIMIZER_CLS_NAMES)}], you provided {optimizer}.")
        return OPTIMIZER_CLS_NAMES[optimizer](learning_rate=lr)
    if isinstance(optimizer, type) and issubclass(optimizer, Optimizer):
        if lr is None:
            raise ValueError("Learning rate is None, but should be specified if optimizer "
                             f"is class ({optimizer}).")
        return optimizer(learning_rate=lr)
    if isinstance(optimizer, Optimizer):
        return optimizer
    if callable(optimizer):
        opt = optimizer(lr) if learning_rate is not None else optimizer()
        if not isinstance(opt, Optimizer):
            raise ValueError(  # noqa: TRY004  (TF 1.15's class)
                "Unrecognized optimizer: function should return subclass of Optimizer. "
                f"Got {opt}.")
        return opt
    raise ValueError("Unrecognized optimizer: should be string, subclass of Optimizer, "
                     "instance of subclass of Optimizer or function with one argument. "
                     f"Got {optimizer}.")


def _adjusted(gradients, noise_scale, multipliers):
    """Gradients with noise added and per-variable multipliers applied."""
    if noise_scale is not None:
        gradients = [(None if grad is None else
                      grad + random_ops.truncated_normal(grad.shape.as_list()) * noise_scale,
                      var) for grad, var in gradients]
    if multipliers is not None:
        gradients = [(_multiplied(grad, var, multipliers), var) for grad, var in gradients]
        if not gradients:
            raise ValueError("Empty list of (gradient, var) pairs encountered. This is most "
                             "likely to be caused by an improper value of "
                             "gradient_multipliers.")
    return gradients


def _multiplied(grad, var, multipliers):
    key = var if var in multipliers else var.op.name
    if grad is None or key not in multipliers:
        return grad
    return grad * constant_ops.constant(multipliers[key], dtype=grad.dtype)


def _global_norm(gradients):
    return clip_ops.global_norm([grad for grad, _ in gradients])


def _clipped(gradients, clip_gradients):
    if isinstance(clip_gradients, float):
        grads, variables = zip(*gradients)
        clipped, _ = clip_ops.clip_by_global_norm(list(grads), clip_gradients)
        return list(zip(clipped, variables))
    if callable(clip_gradients):
        return clip_gradients(gradients)
    if clip_gradients is not None:
        raise ValueError(f"Unknown type {type(clip_gradients)} for clip_gradients")
    return gradients


def _summarize(loss, gradients, clip_gradients, summaries):
    if "loss" in summaries:
        summary.scalar("loss", loss)
    for grad, var in gradients:
        if grad is None:
            continue
        var_name = var.name.replace(":", "_")
        if "gradients" in summaries:
            summary.histogram(f"gradients/{var_name}", grad)
        if "gradient_norm" in summaries:
            summary.scalar(f"gradient_norm/{var_name}", clip_ops.global_norm([grad]))
    if clip_gradients is not None and ("global_gradient_norm" in summaries
                                       or "gradient_norm" in summaries):
        summary.scalar("global_norm/clipped_gradient_norm", _global_norm(gradients))
