"""``tf.nn``: activations, losses, convolution, pooling, normalisation."""

from ..ops.conv_ops import (avg_pool, conv2d, conv2d_backprop_filter, conv2d_backprop_input,
                             conv2d_transpose, max_pool)
from ..ops.depthwise_conv_ops import (depthwise_conv2d, depthwise_conv2d_native,
                                      separable_conv2d)
from ..ops.math_ops import sigmoid, tanh
from ..ops.nn_ops import (bias_add, dropout, elu, gelu, l2_loss, log_softmax,
                         relu, softmax, softmax_cross_entropy_with_logits,
                         softmax_cross_entropy_with_logits_v2,
                         sparse_softmax_cross_entropy_with_logits)
from ..ops.norm_ops import batch_normalization, fused_batch_norm, moments
from ..ops.index_ops import embedding_lookup
from ..ops.norm_ops import local_response_normalization, lrn
from ..ops.select_ops import in_top_k, top_k, zero_fraction
from ..ops.logistic_ops import (l2_normalize, sigmoid_cross_entropy_with_logits,
                                weighted_cross_entropy_with_logits)
# Recurrent networks: tf.nn.rnn_cell, static_rnn, dynamic_rnn (issue 16)
from . import rnn_cell  # noqa: F401
from .rnn import dynamic_rnn, static_rnn  # noqa: F401
# TF 1.15's other activations, 1-D and atrous convolutions, moments and the
# bidirectional RNN (issue 34)
from ..ops.activation_ops import leaky_relu, relu6, selu, softplus, softsign, swish  # noqa: F401
from ..ops.conv1d_ops import atrous_conv2d, conv1d  # noqa: F401
from ..ops.nn_ops import xw_plus_b  # noqa: F401
from ..ops.norm_ops import weighted_moments  # noqa: F401
from .rnn import bidirectional_dynamic_rnn  # noqa: F401

# Sampled losses and candidate samplers (issue 34)
from ..ops.candidate_sampling_ops import (compute_accidental_hits,
                                          log_uniform_candidate_sampler,
                                          uniform_candidate_sampler)
from ..ops.sampled_loss_ops import nce_loss, sampled_softmax_loss

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.nn")
