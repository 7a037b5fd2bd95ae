"""Where Keras 2 and Keras 3 differ, for the TensorFlow trainer (tensorflow_horovod) and its
preflight check (preflight/fw_tensorflow), in one place.

TensorFlow 2.16 and later (NGC's TensorFlow containers among them) ship Keras 3 as `tf.keras`;
Keras 2 lives on as the `tf_keras` package, which TensorFlow serves as `tf.keras` when
TF_USE_LEGACY_KERAS=1 is set before it is imported. Importing this module sets that wherever
tf_keras is installed (a value already set wins), then imports TensorFlow: the modules that use
Keras take `tf` from here (`from .keras_compat import tf`), so the order cannot be lost. Where
tf_keras is absent the trainer runs on Keras 3 through the functions below, which hide these
differences (Keras 2, from tf_keras or built into TensorFlow <= 2.15 -> Keras 3):
- `opt.variables()`, a method -> `opt.variables`, a list;
- variables are tf.Variables -> keras.Variables holding one (`.value`), without `read_value` or
  `ref`, their dtype a name;
- the LossScaleOptimizer's `get_scaled_loss` and `get_unscaled_gradients` -> `scale_loss`, and
  `apply_gradients` unscales by itself;
- `save_weights` to any `.h5` name -> only to names ending `.weights.h5`.
"""

import importlib.util
import os
import sys

LEGACY = "TF_USE_LEGACY_KERAS"


def prefer_tf_keras(environ=None):
    """TF_USE_LEGACY_KERAS=1 where tf_keras is installed and the variable is not set; -> its value."""
    environ = os.environ if environ is None else environ
    if LEGACY not in environ and importlib.util.find_spec("tf_keras") is not None:
        environ[LEGACY] = "1"
    return environ.get(LEGACY)


prefer_tf_keras()
import tensorflow as tf  # noqa: E402  (only now: TensorFlow reads TF_USE_LEGACY_KERAS when imported)


def which():
    """(which Keras `tf.keras` is: "keras 2 (tf_keras)", "keras 3" or "keras 2 (built in)", its version)."""
    package = sys.modules[tf.keras.layers.Layer.__module__.split(".")[0]]
    version = getattr(package, "__version__", "?")
    if package.__name__ == "tf_keras":
        return "keras 2 (tf_keras)", version
    return ("keras 3" if version.split(".")[0] == "3" else "keras 2 (built in)"), version


def sgd(lr, momentum, weight_decay, loss_scaling):
    """The trainer's optimizer: SGD with momentum and (decoupled) weight decay, in a dynamic
    LossScaleOptimizer for float16 (the same constructor and defaults in both Keras)."""
    opt = tf.keras.optimizers.SGD(lr, momentum=momentum, weight_decay=weight_decay)
    return tf.keras.mixed_precision.LossScaleOptimizer(opt) if loss_scaling else opt


def scale_loss(opt, loss):
    """The loss the gradients are taken of: scaled by a LossScaleOptimizer, else as it is."""
    if hasattr(opt, "get_scaled_loss"):  # Keras 2's LossScaleOptimizer
        return opt.get_scaled_loss(loss)
    if hasattr(opt, "scale_loss"):  # Keras 3: every optimizer (unscaled unless loss scaling)
        return opt.scale_loss(loss)
    return loss


def unscale_gradients(opt, grads):
    """Gradients of scale_loss's loss as apply_gradients wants them: Keras 2's LossScaleOptimizer
    wants them unscaled; Keras 3's unscales (and skips a non-finite step) in apply_gradients."""
    if hasattr(opt, "get_unscaled_gradients"):
        return opt.get_unscaled_gradients(grads)
    return grads


def tf_variables(variables):
    """The tf.Variables behind Keras variables (Keras 3's keras.Variable holds one as `.value`),
    for what takes TensorFlow's own: Horovod's broadcast, `read_value`."""
    return [v if isinstance(v, tf.Variable) else v.value for v in variables]


def optimizer_variables(opt):
    """The optimizer's variables (iterations, momenta, a loss scale's), as tf.Variables."""
    variables = opt.variables
    return tf_variables(variables() if callable(variables) else variables)


def dtype(variable):
    """A variable's tf.DType (Keras 3 gives its name)."""
    return tf.as_dtype(variable.dtype)


def weights_file(directory):
    """The final weights' path: Keras 3 saves only to names ending .weights.h5 (Keras 2: HDF5 by .h5)."""
    return os.path.join(directory, "weights.weights.h5")
