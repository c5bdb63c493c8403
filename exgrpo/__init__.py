"""ExGRPO: learning to reason from experience (arXiv 2510.02245), as a library.

`exgrpo.config` holds the one configuration object; `exgrpo.core` the method (buffer, sampler,
selection, advantages, loss, delayed start, reward); runtimes drive the core: `exgrpo.tiny`
(CPU trainer on tiny backbones) and `exgrpo.verl_plugin` (GPU clusters).
"""

__version__ = "0.1.0"
