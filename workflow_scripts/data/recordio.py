"""One RecordIO file per split in the format of MXNet's im2rec: train.rec + train.idx (+ .lst).

Each record is mxnet.recordio.pack(IRHeader(flag=0, label, id=position, id2=0), jpeg), so
mx.io.ImageRecordIter and DALI's MXNet reader read it as they read im2rec's output.
"""

import mxnet as mx

from ..common.errors import run_main
from . import convert


def write_split(out, split, records, count):
    rec_path, idx_path, lst_path = out / f"{split}.rec", out / f"{split}.idx", out / f"{split}.lst"
    rec_io = mx.recordio.MXIndexedRecordIO(str(idx_path), str(rec_path), "w")
    with open(lst_path, "w") as lst:
        for r in records:
            header = mx.recordio.IRHeader(0, float(r.label), r.position, 0)
            rec_io.write_idx(r.position, mx.recordio.pack(header, r.data))
            lst.write(f"{r.position}\t{float(r.label):.6f}\t{r.relpath}\n")
    rec_io.close()
    return [rec_path, idx_path, lst_path]


def main():
    a = convert.arg_parser(__doc__.splitlines()[0]).parse_args()
    convert.run("recordio", write_split, a)


if __name__ == "__main__":
    run_main(main)
