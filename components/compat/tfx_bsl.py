"""tfx_bsl's internals that lockstep uses, behind named functions.

lockstep reads tf.Example TFRecords a batch at a time (components/batched_records.py) and decodes
them with the decoder tfx_bsl's own TFExampleRecord uses, which tfx_bsl keeps private; its reader
is a TFExampleRecord whose source differs, built from what a stock one was built from (kept in
private attributes) and projected as the stock one projects (through the private hook every
TFXIO implements)."""

from __future__ import annotations

import apache_beam as beam
from tfx_bsl.tfxio import telemetry, tf_example_record

from components.compat.symbols import Symbol

_RECORD = tf_example_record.__name__

SYMBOLS = (
    Symbol(_RECORD, "_DecodeBatchExamplesDoFn"),
    *(Symbol(_RECORD, f"TFExampleRecord.{name}")
      for name in ("_file_pattern", "_schema", "_GetSchemaForDecoding", "_ProjectImpl",
                   "_telemetry_descriptors", "_logical_format", "_physical_format")),
)


def example_decoder(schema, raw_record_column_name: str | None) -> beam.DoFn:
    """The DoFn that decodes a list of serialized tf.Examples into RecordBatches (setup(), then
    process(records)): TFExampleRecord's own."""
    return tf_example_record._DecodeBatchExamplesDoFn(schema, raw_record_column_name)


def file_patterns(tfxio: tf_example_record.TFExampleRecord) -> list[str]:
    """The file patterns a TFExampleRecord reads."""
    return list(tfxio._file_pattern)


class ExampleRecord(tf_example_record.TFExampleRecord):
    """A TFExampleRecord for a subclass that reads its own way (its BeamSource): what it was built
    from by public names, and a projection that keeps the subclass."""

    @classmethod
    def like(cls, tfxio: tf_example_record.TFExampleRecord):
        """One built from what a stock TFExampleRecord was built from."""
        return cls(file_pattern=tfxio._file_pattern, schema=tfxio._schema,
                   raw_record_column_name=tfxio.raw_record_column_name,
                   telemetry_descriptors=tfxio.telemetry_descriptors)

    @property
    def file_patterns(self) -> list[str]:
        return file_patterns(self)

    def decoding_schema(self):
        """The schema the decoder takes (None where the examples decode without one)."""
        return self._GetSchemaForDecoding()

    def record_batch_telemetry(self) -> beam.PTransform:
        """The stock source's last step: its telemetry of the RecordBatches read."""
        return telemetry.ProfileRecordBatches(self._telemetry_descriptors, self._logical_format,
                                              self._physical_format)

    def _ProjectImpl(self, tensor_names):
        projected = super()._ProjectImpl(tensor_names)
        return type(self)(file_pattern=self._file_pattern, schema=projected._schema,
                          raw_record_column_name=self.raw_record_column_name,
                          telemetry_descriptors=self.telemetry_descriptors)
