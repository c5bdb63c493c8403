"""The CPU testbed tests run single-threaded: tiny ops on an oversubscribed 2-core box are faster so."""

import torch

torch.set_num_threads(1)
