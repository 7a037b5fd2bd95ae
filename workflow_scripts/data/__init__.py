"""The data stage: ILSVRC2012 raw layout -> index -> TFRecord, RecordIO and LMDB."""
