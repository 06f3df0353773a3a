"""components/batched_records.py: the batched reader gives what TFX's stock TFXIO gives, and
StatisticsGen, Transform and the Evaluator read with it."""

import json

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.evaluator import executor as stock_evaluator
from tfx.components.statistics_gen import executor as stock_statistics
from tfx.components.transform import executor as stock_transform
from tfx.components.util import tfxio_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.types import standard_artifacts
from tfx_bsl.tfxio import raw_tf_record, tf_example_record

from components import evaluator, statistics_gen, transform
from components.batched_records import BatchedExampleRecord, batched_reads

SCHEMA = text_format.Parse("""
    feature { name: "x" type: FLOAT }
    feature { name: "n" type: INT }
    feature { name: "s" type: BYTES }""", schema_pb2.Schema())
RAW = "__raw_record__"


def _example(i: int) -> bytes:
    feature = {"n": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
    if i % 7:  # every seventh row has no x: a missing cell
        feature["x"] = tf.train.Feature(float_list=tf.train.FloatList(value=[i / 3]))
    feature["s"] = tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[f"v{i % 5}".encode()] * (i % 3)))  # 0, 1 or 2 values
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory):
    """Four files of one split: gzip files as the ExampleGen writes them (one of them empty) and a
    plain one."""
    directory = tmp_path_factory.mktemp("records") / "Split-train"
    directory.mkdir()
    sizes, start = {"a.gz": 2500, "b.gz": 1, "c.gz": 0, "d": 730}, 0
    for name, size in sizes.items():
        options = "GZIP" if name.endswith(".gz") else ""
        with tf.io.TFRecordWriter(str(directory / name), options) as writer:
            for i in range(start, start + size):
                writer.write(_example(i))
        start += size
    return directory


_BATCHES: list = []  # what _rows' pipeline saw (the in-process runner shares this module)


def _keep(batch):
    _BATCHES.append(batch)


def _rows(tfxio, batch_size=None):
    """The RecordBatches the source gives, as (rows sorted by their raw record, batch sizes)."""
    _BATCHES.clear()
    with beam.Pipeline() as pipeline:
        _ = pipeline | tfxio.BeamSource(batch_size) | beam.Map(_keep)
    rows = sorted(json.dumps(row, default=repr, sort_keys=True)
                  for batch in _BATCHES for row in batch.to_pylist())
    return rows, sorted(batch.num_rows for batch in _BATCHES)


@pytest.mark.parametrize("batch_size", [None, 300])
def test_it_reads_the_rows_the_stock_source_reads(split_dir, batch_size):
    pattern = [str(split_dir / "*")]
    stock = tf_example_record.TFExampleRecord(pattern, schema=SCHEMA, raw_record_column_name=RAW)
    batched = BatchedExampleRecord(pattern, schema=SCHEMA, raw_record_column_name=RAW)
    assert batched.ArrowSchema().equals(stock.ArrowSchema())
    stock_rows, _ = _rows(stock, batch_size)
    rows, sizes = _rows(batched, batch_size)
    assert len(rows) == 3231 and rows == stock_rows  # missing x, empty s, raw records alike
    # A batch never spans files: a file gives full batches and its remainder. Unnamed, a batch
    # takes up to batched_records.MAX_ROWS of these small rows: a file each.
    assert sizes == ([1, 100, 130] + [300] * 10
                     if batch_size else [1, 730, 2500])


def test_unnamed_a_batch_holds_about_the_target_bytes(split_dir, monkeypatch):
    """tfx_bsl's byte-size batching: the rows a batch takes come from a file's first records'
    size, so wider rows make shorter batches, and the same file is cut the same way each time."""
    from components import batched_records

    path = str(split_dir / "a.gz")
    mean = sum(map(len, tf.compat.v1.io.tf_record_iterator(path, "GZIP"))) / 2500
    monkeypatch.setattr(batched_records, "PROBE", 2500)  # the whole file: an exact mean
    monkeypatch.setattr(batched_records, "TARGET_BYTES", int(500 * mean) + 1)
    assert batched_records.rows_per_batch(path, "GZIP") == 500
    _, sizes = _rows(BatchedExampleRecord([path], schema=SCHEMA))
    assert sizes == [500] * 5
    monkeypatch.setattr(batched_records, "TARGET_BYTES", 1)  # a row larger than the target
    assert batched_records.rows_per_batch(path, "GZIP") == 1
    monkeypatch.setattr(batched_records, "TARGET_BYTES", 2**40)
    assert batched_records.rows_per_batch(path, "GZIP") == batched_records.MAX_ROWS


def test_a_projection_stays_batched(split_dir):
    batched = BatchedExampleRecord([str(split_dir / "*")], schema=SCHEMA)
    projected = batched.Project(["n"])
    assert type(projected.projected) is BatchedExampleRecord  # its BeamSource reads
    rows, _ = _rows(projected)
    assert len(rows) == 3231 and set(json.loads(rows[0])) == {"n"}


def test_no_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nothing-*")):
        BatchedExampleRecord([str(tmp_path / "nothing-*")], schema=SCHEMA).BeamSource()


def test_a_compression_the_reader_cannot_read_is_one_line(tmp_path):
    (tmp_path / "a.bz2").write_bytes(b"")
    pattern = [str(tmp_path / "*")]
    with pytest.raises(Exception, match=r"a\.bz2: a compression TensorFlow's record reader cannot read"):
        _rows(BatchedExampleRecord(pattern, schema=SCHEMA))


def test_batched_reads_replaces_only_tf_example_records_and_only_inside(split_dir):
    def make(pattern, **kwargs):
        return tfxio_utils.make_tfxio(pattern, ["test"], "FORMAT_TF_EXAMPLE", schema=SCHEMA,
                                      **kwargs)

    pattern = str(split_dir / "*")
    assert type(make(pattern)) is tf_example_record.TFExampleRecord
    with batched_reads():
        tfxio = make(pattern, raw_record_column_name=RAW)
        assert type(tfxio) is BatchedExampleRecord and tfxio.raw_record_column_name == RAW
        assert tfxio.telemetry_descriptors == ["test"]
        # Raw records as such, and files the reader cannot read, keep TFX's own TFXIO.
        assert type(make(pattern, read_as_raw_records=True, raw_record_column_name=RAW)) \
            is raw_tf_record.RawTfRecordTFXIO
        assert type(make(str(split_dir / "*.bz2"))) is tf_example_record.TFExampleRecord
    assert type(make(pattern)) is tf_example_record.TFExampleRecord


@pytest.mark.parametrize("executor, stock", [
    (transform.Executor, stock_transform.Executor),
    (evaluator.Executor, stock_evaluator.Executor),
    (statistics_gen.Executor, stock_statistics.Executor)])
def test_the_components_read_batched(monkeypatch, executor, stock):
    """Each executor runs TFX's own Do inside batched_reads (the whole components run in
    test_pipeline_e2e.py)."""
    seen, thresholds = [], []

    def stock_do(self, input_dict, output_dict, exec_properties):
        seen.append(tfxio_utils.make_tfxio.__qualname__)
        thresholds.append(np.get_printoptions()["threshold"])

    monkeypatch.setattr(stock, "Do", stock_do)
    inputs, outputs = {"examples": [standard_artifacts.Examples()]}, {}
    if executor is evaluator.Executor:  # its serving check around TFX's Do: not the subject here
        class Check:
            def verdict(self):
                return "ok"

        monkeypatch.setattr(evaluator.serving_check, "start", lambda *args, **kwargs: Check())
        monkeypatch.setattr(evaluator.serving_check, "eval_example_files", lambda *args: [])
        monkeypatch.setattr(evaluator.serving_versions, "content_hash", lambda *args: "sha")
        inputs["model"] = [standard_artifacts.Model()]
        outputs["blessing"] = [standard_artifacts.ModelBlessing()]
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=[])
    executor(context).Do(inputs, outputs, {})
    assert seen == ["batched_reads.<locals>.make_tfxio"]
    assert tfxio_utils.make_tfxio.__qualname__ == "make_tfxio"  # restored
    if executor is evaluator.Executor:  # TensorFlow's dropped TypeErrors summarize each batch
        assert thresholds == [8] and np.get_printoptions()["threshold"] == 1000


@pytest.mark.parametrize("copies", [False, True])
def test_statistics_gen_gives_the_stock_figures(split_dir, copied_split_dir, tmp_path, copies):
    """The real executor over the batched reader, from the records or from their columnar
    copies: the exact figures equal stock StatisticsGen's (quantiles and histograms are
    sketches; they vary with batching, stock's own too)."""
    if copies:
        split_dir = copied_split_dir
    examples = standard_artifacts.Examples()
    examples.uri = str(split_dir.parent)
    examples.split_names = '["train"]'
    stats = {}
    for name, executor in (("stock", stock_statistics.Executor),
                           ("batched", statistics_gen.Executor)):
        out = standard_artifacts.ExampleStatistics()
        out.uri = str(tmp_path / name)
        context = base_beam_executor.BaseBeamExecutor.Context(
            beam_pipeline_args=[], tmp_dir=str(tmp_path / "tmp" / name) + "/")
        executor(context).Do({"examples": [examples]}, {"statistics": [out]}, {})
        [path] = tf.io.gfile.glob(f"{out.uri}/Split-train/*")
        stats[name] = tfdv.load_stats_binary(path).datasets[0]
    stock, batched = stats["stock"], stats["batched"]
    assert batched.num_examples == stock.num_examples == (1730 if copies else 3231)

    def exact(dataset):
        found = {}
        for f in dataset.features:
            common = f.num_stats.common_stats if f.HasField("num_stats") else \
                f.string_stats.common_stats
            found[f.path.step[0]] = (
                common.num_non_missing, common.num_missing, common.min_num_values,
                common.max_num_values, common.tot_num_values,
                f.num_stats.min, f.num_stats.max, f.num_stats.num_zeros,
                f.string_stats.unique,
                [(v.value, v.frequency) for v in f.string_stats.top_values])
        return found

    assert exact(batched) == exact(stock)
    missing_x = 600 + len([i for i in range(600, 1730) if i % 7 == 0]) if copies else 3231 // 7 + 1
    assert exact(batched)["x"][1] == missing_x  # rows 0, 7, 14, ... have no x


@pytest.fixture(scope="module")
def copied_split_dir(tmp_path_factory):
    """Two gzip files as the ExampleGen writes them, each with its columnar copy; column "x" has
    no value in the first 600 rows of the first file (a batch whose column the decoder types as
    null without a schema)."""
    from tfx_bsl.coders import example_coder

    from components import columnar_examples, csv_format

    directory = tmp_path_factory.mktemp("copied") / "Split-train"
    directory.mkdir()
    encoder = example_coder.RecordBatchToExamplesEncoder()
    for name, rows in (("a.gz", range(0, 1500)), ("b.gz", range(1500, 1730))):
        cells = pa.RecordBatch.from_arrays([
            pa.array([str(i) for i in rows]),
            pa.array([None if i < 600 or i % 7 == 0 else str(i / 3) for i in rows]),
            pa.array([None if i % 3 == 0 else f"v{i % 5}" for i in rows])], ["n", "x", "s"])
        typed = csv_format.typed_batch(cells, {"n": "int", "x": "float", "s": "string"})
        path = str(directory / name)
        with tf.io.TFRecordWriter(path, "GZIP") as writer:
            for record in encoder.encode(typed):
                writer.write(record)
        columnar_examples.write(path, typed)
    return directory


@pytest.mark.parametrize("schema, raw", [(None, None), (SCHEMA, None), (SCHEMA, RAW)])
def test_files_with_a_columnar_copy_read_from_it_as_their_records_decode(
        copied_split_dir, monkeypatch, schema, raw):
    """Batch for batch what decoding the records gives (the decoder's types and column order, a
    null column where a batch has no value), from the copies; wanting raw records too, each row's
    own record beside its columns."""
    from components import columnar_examples

    served = []
    original = columnar_examples.read

    def read(*args):
        result = original(*args) if copies else None
        served.append(result is not None)
        return result

    monkeypatch.setattr(columnar_examples, "read", read)
    batched = BatchedExampleRecord([str(copied_split_dir / "*")], schema=schema,
                                   raw_record_column_name=raw)
    batches = {}
    for copies in (False, True):
        served.clear()
        _rows(batched, 300)
        batches[copies] = sorted(_BATCHES, key=lambda b: b.column("n").to_pylist()[0])
    assert served == [True, True]
    assert [b.num_rows for b in batches[True]] == [300] * 5 + [230]
    for a, b in zip(batches[True], batches[False], strict=True):
        assert a.equals(b), (a.schema, b.schema)
        for x, y in zip(a.columns, b.columns):  # laid out alike: a null list holds no value
            if x.type != pa.null():
                assert x.flatten().equals(y.flatten())
                np.testing.assert_array_equal(np.diff(x.offsets), np.diff(y.offsets))
    if schema is None:
        assert [str(b.column("x").type) for b in batches[True][:3]] == [
            "null", "null", "large_list<item: float>"]
