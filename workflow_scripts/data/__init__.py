"""The data stage: ILSVRC2012 raw layout -> index -> TFRecord, RecordIO and LMDB (rules/data.smk).

`layout`          the raw layout: which files exist and which synset each belongs to
`listing`         what the index depends on in dataset.root, cheap enough for every parse
`embedded`        the embedded default dataset, generated in the exact raw layout
`image_records`   what an ILSVRC2012 file really is, and the bytes a record stores for it
`index`           the index: every image found, checked, labelled and put in order
`convert`         what the three converters share: the index, parallel encoding, the manifest
`sources`         which form the dataset is held in, and the bytes of each image from it:
`tree`            an extracted tree (ILSVRC2012's raw layout, Kaggle's)
`archives`        image-net.org's tar files, read in place, never extracted
`parquet`         Hugging Face's imagenet-1k parquet shards
`tfrecord`        TensorFlow's TFRecord shards and DALI's index files
`recordio`        MXNet's RecordIO, as im2rec writes it
`lmdb_caffe2`     the LMDB in Caffe2's format, which PyTorch reads
`caffe2_proto`    Caffe2's TensorProto messages, defined at run time
`lmdb_dataset`    a PyTorch Dataset over that LMDB
`records`         the converted files read record by record, for the check
`verify`          a converted copy checked against its manifest
`upgrade`         copies an earlier version converted, marked as complete by one command
"""
