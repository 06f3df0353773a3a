"""The Arrow ExampleGen types and encodes CSVs exactly as the per-row Python one did.

The oracle below is the per-row reader lockstep shipped before (Python's csv module, a type per
column from each cell, one tf.train.Example per row), kept here only to compare with. The real
executor runs in a Beam pipeline on real files: several files, a BOM, CRLF, quoted commas and
newlines, padded and several kinds of missing cells, ints mixed with floats, strings, a blank
line, a cell over 128 KiB.
"""

import csv
import json
import math

import pyarrow as pa
import pytest
import tensorflow as tf
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs
from google.protobuf import json_format
from tensorflow_metadata.proto.v0 import schema_pb2

from components import columnar_examples, csv_example_gen, csv_format, csv_records
from components import example_gen_spec, row_split

MISSING = list(csv_format.DEFAULT_MISSING_VALUES)
HEADER = ["id", "count", "ratio", "name", "note", "label"]


def _rows(n, start):
    rows = []
    for i in range(start, start + n):
        rows.append([
            str(i),
            "NA" if i % 7 == 0 else f" {i * 3} ",           # int with padded and NA cells
            "" if i % 5 == 0 else (str(i) if i % 2 else f"{i / 3:.6f}"),  # ints and floats: float
            "null" if i % 11 == 0 else f"name, {i % 13}",     # strings with a quoted comma
            f"line one\nline {i}" if i % 17 == 0 else "x" * (i % 4),  # newline in a quoted cell
            ["a", "b", "c"][i % 3],
        ])
    return rows


@pytest.fixture(scope="module")
def csv_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("csv")
    for index, (n, start) in enumerate([(120, 0), (90, 120), (60, 210)]):
        with open(root / f"part-{index}.csv", "w", newline="",
                  encoding="utf-8-sig" if index == 0 else "utf-8") as handle:
            writer = csv.writer(handle, lineterminator="\r\n" if index == 1 else "\n")
            writer.writerow(HEADER)
            rows = _rows(n, start)
            if index == 2:
                rows[5][4] = "y" * (200 << 10)  # a 200 KiB cell: Python's csv caps at 128 KiB
            for at, row in enumerate(rows):
                writer.writerow(row)
                if at == 3:
                    handle.write("\n")  # a blank line
    return root


def _old_classify(cell):
    try:
        int(cell)
        return csv_format.INT
    except ValueError:
        pass
    try:
        value = float(cell)
    except ValueError:
        return csv_format.STRING
    return csv_format.FLOAT if math.isfinite(value) else csv_format.STRING


def _old_examples(files):
    """The per-row Python ExampleGen of before, as the oracle."""
    csv.field_size_limit(1 << 30)
    rows = []
    for path in files:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            header = [h.strip() for h in next(reader)]
            rows += [r for r in reader if r and not (len(r) == 1 and not r[0].strip())]
    types = {}
    for at, name in enumerate(header):
        kinds = [_old_classify(r[at].strip()) for r in rows if r[at].strip() not in MISSING]
        numbers = sum(k != csv_format.STRING for k in kinds)
        types[name] = (csv_format.STRING if numbers == 0 or numbers < len(kinds) - numbers
                       else csv_format.FLOAT if csv_format.FLOAT in kinds else csv_format.INT)
    examples = []
    for row in rows:
        feature = {}
        for name, cell in zip(header, row):
            cell = cell.strip()
            if cell in MISSING:
                feature[name] = tf.train.Feature()
            elif types[name] == csv_format.INT:
                feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(cell)]))
            elif types[name] == csv_format.FLOAT:
                feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(cell)]))
            else:
                feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[cell.encode()]))
        examples.append(tf.train.Example(features=tf.train.Features(feature=feature)))
    return types, examples


def _canonical(example: tf.train.Example) -> str:
    return example.SerializeToString(deterministic=True).hex()


def _run_executor(csv_dir, out_dir, beam_args=()):
    examples = standard_artifacts.Examples()
    examples.uri = str(out_dir)
    output = example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
        example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=2),
        example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)]))
    exec_properties = {
        specs.INPUT_BASE_KEY: str(csv_dir),
        specs.INPUT_CONFIG_KEY: json_format.MessageToJson(example_gen_pb2.Input(splits=[
            example_gen_pb2.Input.Split(name="single_split", pattern="*.csv")])),
        specs.OUTPUT_CONFIG_KEY: json_format.MessageToJson(output),
        specs.CUSTOM_CONFIG_KEY: json_format.MessageToJson(
            example_gen_spec.ExampleGenSpec("label", tuple(MISSING)).to_custom_config()),
    }
    executor = csv_example_gen.Executor(
        csv_example_gen.Executor.Context(beam_pipeline_args=list(beam_args), tmp_dir=str(out_dir)))
    executor.Do({}, {specs.EXAMPLES_KEY: [examples]}, exec_properties)
    return examples


def _split_records(out_dir, split):
    files = sorted(tf.io.gfile.glob(f"{out_dir}/Split-{split}/*"))
    assert files and all(f.split("/")[-1].startswith("data_tfrecord-") for f in files), files
    return [bytes(r.numpy()) for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def test_types_and_examples_equal_the_per_row_reader(csv_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(csv_format, "BLOCK_BYTES", 2048)  # many batches, on several threads
    files = sorted(str(p) for p in csv_dir.glob("*.csv"))
    old_types, old_examples = _old_examples(files)
    assert old_types == {"id": "int", "count": "int", "ratio": "float", "name": "string",
                         "note": "string", "label": "string"}
    artifact = _run_executor(csv_dir, tmp_path / "out")
    assert json.loads(artifact.split_names) == ["train", "eval"]
    train, eval_ = _split_records(tmp_path / "out", "train"), _split_records(tmp_path / "out", "eval")
    new = sorted(_canonical(tf.train.Example.FromString(r)) for r in train + eval_)
    assert len(new) == 270
    assert new == sorted(_canonical(e) for e in old_examples)
    # lockstep's split rule (components/row_split.py) over each whole file read as one batch:
    # the same splits, whatever the batches and threads the executor read them in.
    missing = csv_format.missing_tokens(MISSING)
    rule = row_split.SplitRule((2, 1))
    expected = {"train": set(), "eval": set()}
    for path in files:
        header, offset = csv_format.read_header(path)
        read = csv_format.Read(path, offset, -1)
        whole = pa.Table.from_batches(list(csv_format.record_batches(read, header)))
        whole = whole.combine_chunks().to_batches()[0]
        splits = rule.assign(csv_format.clean(whole, missing),
                             csv_format.relative_name(path, str(csv_dir)), offset, 0)
        for row_id, split in zip(whole.column(0).to_pylist(), splits):
            expected[("train", "eval")[split]].add(int(row_id))
    for split, records in (("train", train), ("eval", eval_)):
        ids = {tf.train.Example.FromString(r).features.feature["id"].int64_list.value[0]
               for r in records}
        assert ids == expected[split]
    assert 150 < len(train) < 210
    assert not tf.io.gfile.glob(f"{tmp_path}/out/*/{csv_records.TEMP_PREFIX}*")
    # Each split's record count, written beside it, is what the Trainer's plan reads instead of
    # reading every record (written from many batches on several threads here).
    from trainer_module import input_pipeline

    for split, records in (("train", train), ("eval", eval_)):
        pattern = f"{tmp_path}/out/Split-{split}/*"
        assert input_pipeline.recorded_rows([pattern]) == len(records)
        assert input_pipeline.count_records(input_pipeline.list_files(pattern)) == len(records)
    both = [f"{tmp_path}/out/Split-{s}/*" for s in ("train", "eval")]
    assert input_pipeline.recorded_rows(both) == 270
    # A pattern for part of a split dir, or a dir with no count: None (the plan counts).
    assert input_pipeline.recorded_rows([f"{tmp_path}/out/Split-train/data_tfrecord-0*"]) is None
    assert input_pipeline.recorded_rows([f"{tmp_path}/elsewhere/*"]) is None


def test_each_file_has_a_columnar_copy_that_reads_as_the_decoder_decodes(csv_dir, tmp_path,
                                                                         monkeypatch):
    """components/columnar_examples.py: beside every TFRecord file, its rows as Arrow columns,
    which read as tfx_bsl's decoder decodes the records, batch by batch, for no schema, the
    ExampleGen's types schema and a projection of it in another order."""
    import numpy as np
    import pyarrow as pa
    from tfx_bsl.arrow import array_util
    from tfx_bsl.coders import example_coder

    monkeypatch.setattr(csv_format, "BLOCK_BYTES", 2048)  # many files, each from one batch
    _run_executor(csv_dir, tmp_path / "out")
    types = json.loads((tmp_path / "out" / csv_records.COLUMN_TYPES_FILE).read_text())
    full = csv_records.types_schema(types)
    part = schema_pb2.Schema()
    for name in ("ratio", "id", "note"):
        part.feature.add().CopyFrom(next(f for f in full.feature if f.name == name))
    files = sorted(f for split in ("train", "eval")
                   for f in tf.io.gfile.glob(f"{tmp_path}/out/Split-{split}/*"))
    assert len(files) > 10
    copies = sorted(tf.io.gfile.glob(f"{tmp_path}/out/Split-*.arrow/*"))
    assert copies == sorted(columnar_examples.copy_path(f) for f in files)  # no temporary left
    for schema in (None, full, part):
        decoder = example_coder.ExamplesToRecordBatchDecoder(
            *([] if schema is None else [schema.SerializeToString()]))
        for path in files:
            records = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(path, "GZIP")]
            decoded = [decoder.DecodeBatch(records[i:i + 7]) for i in range(0, len(records), 7)]
            copied = list(columnar_examples.read(path, 7, schema))
            assert len(copied) == len(decoded)
            for a, b in zip(copied, decoded):
                assert a.equals(b), (path, schema, a.schema, b.schema)
                for x, y in zip(a.columns, b.columns):  # laid out alike too: no value under a null
                    if x.type != pa.null():
                        np.testing.assert_array_equal(np.diff(x.offsets), np.diff(y.offsets))
                        assert x.flatten().equals(y.flatten())
                        np.testing.assert_array_equal(
                            array_util.GetFlattenedArrayParentIndices(x),
                            array_util.GetFlattenedArrayParentIndices(y))
    # A schema the copy cannot serve as the decoder would: a type it was not written with, a
    # feature it lacks. The reader then decodes the records.
    other = schema_pb2.Schema()
    other.CopyFrom(part)
    other.feature[0].type = schema_pb2.INT
    assert columnar_examples.read(files[0], 7, other) is None
    other.CopyFrom(part)
    other.feature.add(name="elsewhere", type=schema_pb2.INT)
    assert columnar_examples.read(files[0], 7, other) is None


def test_the_same_input_gives_the_same_splits(csv_dir, tmp_path):
    _run_executor(csv_dir, tmp_path / "a")
    _run_executor(csv_dir, tmp_path / "b")
    for split in ("train", "eval"):
        a, b = (sorted(_canonical(tf.train.Example.FromString(r))
                       for r in _split_records(tmp_path / run, split)) for run in "ab")
        assert a == b


def test_the_same_input_gives_the_same_files_under_the_same_names(csv_dir, tmp_path,
                                                                  monkeypatch):
    """Which file a row lands in, the files' names and the rows' order in each depend on the data
    alone, not on the order Beam's workers wrote them in (before: each file took a random
    temporary name and the names were given in that name's order, so one run's file 3 was another
    run's file 7, and the Trainer's validation part, carved by file name and place, moved). The
    files follow the CSV order: by source file, then by place in it. Each split's row identities
    are written beside it, the same in both runs."""
    from trainer_module import input_pipeline

    monkeypatch.setattr(csv_format, "BLOCK_BYTES", 2048)  # many files, written on several threads
    for run in "ab":
        _run_executor(csv_dir, tmp_path / run)
    for split in ("train", "eval"):
        listing = {}
        for run in "ab":
            files = sorted(tf.io.gfile.glob(f"{tmp_path}/{run}/Split-{split}/*"))
            listing[run] = [(f.rsplit("/", 1)[1], [_canonical(tf.train.Example.FromString(
                r.numpy())) for r in tf.data.TFRecordDataset(f, compression_type="GZIP")],
                open(columnar_examples.copy_path(f), "rb").read()) for f in files]
        assert len(listing["a"]) > 3 and listing["a"] == listing["b"]
        ids = [[tf.train.Example.FromString(bytes.fromhex(r)).features.feature["id"]
                .int64_list.value[0] for r in records] for _, records, _ in listing["a"]]
        assert all(i == sorted(i) for i in ids) and [i[0] for i in ids] == sorted(
            i[0] for i in ids)
        identities = [input_pipeline.recorded_identities(f"{tmp_path}/{run}/Split-{split}/*")
                      for run in "ab"]
        assert identities[0] == identities[1]
        assert [row[0] for row in identities[0]] == [name for name, _, _ in listing["a"]]
        assert [row[4] for row in identities[0]] == [len(r) for _, r, _ in listing["a"]]
        assert identities[0][0][1:4] == ["part-0.csv", identities[0][0][2], 0]
    assert input_pipeline.fingerprint(f"{tmp_path}/a/Split-train/*", seed=1) == \
        input_pipeline.fingerprint(f"{tmp_path}/b/Split-train/*", seed=1) != \
        input_pipeline.fingerprint(f"{tmp_path}/b/Split-train/*", seed=2)
    # Files without recorded identities (part of a split dir here): their names and sizes, marked.
    assert input_pipeline.fingerprint(f"{tmp_path}/a/Split-train/data_tfrecord-*").startswith("~")


def test_byte_ranges_read_every_row_once(tmp_path):
    path = tmp_path / "big.csv"
    rows = [[str(i), f"v{i}", str(i * 0.5)] for i in range(5000)]
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows([["a", "b", "c"]] + rows)
    header, offset = csv_format.read_header(str(path))
    reads = csv_format.plan_reads(str(path), offset, range_bytes=997)
    assert len(reads) > 50
    seen = [v for read in reads for batch in csv_format.record_batches(read, header, 4096)
            for v in batch.column(0).to_pylist()]
    assert seen == [r[0] for r in rows]


def test_a_file_with_quotes_is_read_as_one_range(csv_dir):
    path = str(csv_dir / "part-0.csv")
    _, offset = csv_format.read_header(path)
    assert len(csv_format.plan_reads(path, offset, range_bytes=100)) == 1


@pytest.mark.parametrize("cells, error", [
    (["1", "2", "99999999999999999999"], "column 'x' line 4 holds 99999999999999999999, an "
                                         "integer beyond the int64 range"),
    (["1", "2", "3", "1_000"], "column 'x' is numeric (3 numbers) but line 5 holds text '1_000'"),
    (["1", "2", "3", "\u0661\u0662"], "but line 5 holds text '\u0661\u0662'"),
])
def test_numbers_are_strict(tmp_path, cells, error):
    path = tmp_path / "n.csv"
    path.write_text("x,y\n" + "".join(f"{c},a\n" for c in cells), encoding="utf-8")
    header, offset = csv_format.read_header(str(path))
    missing = csv_format.missing_tokens(MISSING)
    profiles = csv_format.merge_profiles(
        csv_format.profile_batch(csv_format.clean(b, missing))
        for b in csv_format.record_batches(csv_format.Read(str(path), offset, -1), header))
    with pytest.raises(csv_format.CsvError) as err:
        csv_format.column_types(header, profiles, str(path), [str(path)], MISSING)
    assert error in str(err.value) and str(err.value).startswith(str(path))


def test_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("a,b\n1,caf\u00e9\n".encode("latin-1"))
    header, offset = csv_format.read_header(str(path))
    with pytest.raises(csv_format.CsvError, match=r"latin1.csv: not UTF-8 text \(byte 9\)"):
        list(csv_format.record_batches(csv_format.Read(str(path), offset, -1), header))


def test_example_gen_spec_round_trips_through_the_custom_config():
    spec = example_gen_spec.ExampleGenSpec("label", ("", "NA"), "span-{SPAN}/*.csv", 3, "",
                                          ("user", "day"), 7)
    raw = json_format.MessageToJson(spec.to_custom_config())
    assert example_gen_spec.ExampleGenSpec.from_exec_properties(
        {specs.CUSTOM_CONFIG_KEY: raw}) == spec  # the Struct's 3.0 comes back as the int 3


@pytest.mark.parametrize("change, error", [
    ({"span_windw": 2}, "unknown key(s) span_windw"),
    ({"span_window": None}, "missing key(s) span_window"),
    ({"span_window": 1.5}, "span_window must be a whole number >= 1, got 1.5"),
    ({"span_window": "2"}, "span_window must be a whole number >= 1, got '2'"),
    ({"missing_values": "NA"}, "missing_values must be a list of text, got 'NA'"),
    ({"label": 3}, "label must be text, got 3"),
    ({"split_by": "user"}, "split_by must be a list of column names, got 'user'"),
    ({"split_seed": 0.5}, "split_seed must be a whole number, got 0.5"),
    ({"split_by": ["user", "label"]},
     "data.split_by: the label 'label' can never decide the split (a row's split must not "
     "depend on its answer)"),
])
def test_example_gen_spec_refuses_unknown_missing_and_mistyped_keys(change, error):
    values = example_gen_spec.ExampleGenSpec("label").to_dict()
    values.update(change)
    values = {k: v for k, v in values.items() if v is not None}
    with pytest.raises(example_gen_spec.ExampleGenConfigError) as caught:
        example_gen_spec.ExampleGenSpec.from_dict(values)
    assert str(caught.value) == f"ExampleGen custom_config: {error}"
