"""The Evaluator's own parts that need no run (the whole of it runs in test_evaluation.py and
test_pipeline_e2e.py): the columns it decodes from the raw examples."""

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from components.evaluator import needed_columns
from trainer_module import features


def test_the_evaluator_decodes_only_the_slice_columns_and_the_label():
    schema = text_format.Parse("""
        feature { name: "island" type: BYTES }
        feature { name: "bill_length_mm" type: FLOAT }
        feature { name: "species" type: BYTES }
        feature { name: "year" type: INT }
        string_domain { name: "island" value: "Biscoe" }""", schema_pb2.Schema())
    from tensorflow_model_analysis.proto import config_pb2 as tfma

    config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(label_key=features.transformed_name("species"))],
        slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=["island"]),
                       tfma.SlicingSpec(feature_values={"year": "2007"})])
    kept = needed_columns(schema, config)
    assert [f.name for f in kept.feature] == ["island", "species", "year"]
    assert kept.string_domain[0].name == "island"  # what the kept features refer to stays
    # No slices: the label's column alone.
    config.ClearField("slicing_specs")
    assert [f.name for f in needed_columns(schema, config).feature] == ["species"]


def test_no_hot_key_fanout_on_the_direct_runner_only():
    from components.compat.tfma import hot_key_fanout
    from components.evaluator import _no_hot_key_fanout

    stock = hot_key_fanout()
    assert stock == 8
    for args in ([], ["--runner=DirectRunner", "--direct_num_workers=2"]):
        with _no_hot_key_fanout(args):
            assert hot_key_fanout() is None
        assert hot_key_fanout() == stock
    with _no_hot_key_fanout(["--runner=DataflowRunner"]):
        assert hot_key_fanout() == stock
