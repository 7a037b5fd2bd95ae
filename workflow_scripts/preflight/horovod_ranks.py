"""What the two Horovod frameworks share in preflight: the collective's name, and Horovod started
with the launcher's settings, as their trainers start it."""

import importlib

from ..cluster.rank_env import setup_horovod


class HorovodRanks:
    horovod_module = ""  # horovod.tensorflow or horovod.mxnet

    @property
    def backend(self):
        return "horovod nccl" if self.gpu else "horovod gloo"

    def init(self):
        self.hvd = importlib.import_module(self.horovod_module)
        setup_horovod(self.launch)
        self.hvd.init()
