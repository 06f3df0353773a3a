"""Everything the Trainer runs.

Legacy Keras (tf_keras) is chosen here, the one place it is set: Keras 3 custom loops under
tf.distribute had silent gradient-sum bugs, and the choice must be made before TensorFlow is
imported. `pipeline` and `components` import this package first, so every process of lockstep
(the CLI, each Kubeflow task, each Beam worker) makes it in time.
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
