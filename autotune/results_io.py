"""Results files: the public names of autotune.codec, under the module
name earlier versions used (load_results, dump_results, atomic_write,
CacheFileError, ...). New code imports autotune.codec."""
from autotune.codec import *  # noqa: F401,F403
from autotune.codec import __all__  # noqa: F401
