"""The wall: every private name of TFX, tfx_bsl, TFMA, tf.Transform, KFP and ML Metadata that
lockstep uses, and every name of theirs it rebinds at run time, is used here and nowhere else.

One module per dependency: `tfx.py`, `tfx_bsl.py`, `tfma.py`, `tft.py`, `kfp.py` (ML Metadata's
public names suffice); and `beam.py`, `dill.py` and `cloudpickle.py`, the names of
Beam's and of its picklers' that lockstep rebinds while its Beam executors run, to spare their
fixed costs (`beam.spare_fixed_costs`; not linted: beam.py says why). Each holds thin named
functions, constants and context managers, a docstring each saying what the private thing is and
why lockstep needs it, and declares what it reaches in its `SYMBOLS` (`symbols.Symbol`):
tests/test_compat.py resolves each against the installed version and names the one an upgrade
moved. `swapped.py` is the rebinding itself. Outside this package, tools/private_names.py (in
`make lint` and tests/test_private_names.py) refuses any such use; docs/upgrading.md is the
upgrade's checklist.

The `pipeline` package and `components` import the wall; `trainer_module` never does. Its
modules import their dependency where it is used (tfx.py's only inside its functions: a
Kubeflow task's entrypoint imports it before anything heavy).
"""
