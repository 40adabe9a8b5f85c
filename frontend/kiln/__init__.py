"""kiln: a tracing JIT compiler for tensor programs, with a PyTorch-compatible eager API.

``import kiln as torch`` is meant to work for model code: tensors, ``kiln.nn``,
``kiln.nn.functional`` and the eager op set follow PyTorch's names and semantics.
"""

from kiln import _blas_env

_blas_env.configure()  # must run before _C loads the BLAS

from kiln import _C  # noqa: E402
from kiln._tensor import (  # noqa: E402,F401
    Size,
    Tensor,
    device,
    dtype,
    get_default_device,
    set_default_device,
)

bool = _C.dtype.bool  # noqa: A001 - torch spelling
uint8 = _C.dtype.uint8
int8 = _C.dtype.int8
int16 = short = _C.dtype.int16
int32 = int = _C.dtype.int32  # noqa: A001
int64 = long = _C.dtype.int64
float16 = half = _C.dtype.float16
bfloat16 = _C.dtype.bfloat16
float32 = float = _C.dtype.float32  # noqa: A001
float64 = double = _C.dtype.float64

from_numpy = _C.from_numpy
# The LAPACK-backed table ops kiln.linalg is written over (their op-table spellings).
from kiln._C import (  # noqa: E402,F401,I001
    _linalg_cholesky, _linalg_det_sign, _linalg_eigh_packed, _linalg_logabsdet, _linalg_solve,
    _linalg_solve_triangular,
)
# Shapes that do not broadcast or multiply: a RuntimeError (torch) and a ValueError (NumPy).
ShapeError = _C.ShapeError
promote_types = _C.promote_types
get_default_dtype = _C.get_default_dtype
set_default_dtype = _C.set_default_dtype
get_num_threads = _C.get_num_threads
set_num_threads = _C.set_num_threads

from kiln._ops import *  # noqa: E402,F401,F403
from kiln._ops import _assert  # noqa: E402,F401 - torch._assert (private, so not in *)

__version__ = "0.1.0"

# Order matters: the capture frontend subclasses kiln.nn.Module.
from kiln import nn  # noqa: E402,F401,I001  (torch.nn is available after `import torch`)
from kiln import autograd  # noqa: E402,F401,I001
from kiln import func  # noqa: E402,F401,I001
from kiln import optim  # noqa: E402,F401,I001  (after nn: its hooks come from kiln.nn)
from kiln import compiler  # noqa: E402,F401,I001
from kiln import distributed, multiprocessing  # noqa: E402,F401,I001
from kiln import utils  # noqa: E402,F401,I001
from kiln.serialization import load, save  # noqa: E402,F401,I001
from kiln import amp, backends, linalg, special  # noqa: E402,F401,I001
from kiln.backends import (  # noqa: E402,F401,I001
    are_deterministic_algorithms_enabled,
    get_float32_matmul_precision,
    is_deterministic_algorithms_warn_only_enabled,
    set_float32_matmul_precision,
    use_deterministic_algorithms,
)
from kiln import fx  # noqa: E402,F401,I001 - torch.fx.wrap
from kiln.amp.autocast import (  # noqa: E402,F401,I001 - torch.autocast and its state
    autocast,
    get_autocast_cpu_dtype,
    get_autocast_dtype,
    get_autocast_gpu_dtype,
    is_autocast_cpu_enabled,
    is_autocast_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
)
from kiln._capture.compile import compile  # noqa: E402,F401,A001,I001 - torch spelling
from kiln._capture.context import mark_dynamic, mark_static  # noqa: E402,F401,I001
from kiln._capture.explain import explain  # noqa: E402,F401,I001
from kiln import cpu, cuda  # noqa: E402,F401,I001
from kiln._export import Dim, ExportedProgram, export, load_exported  # noqa: E402,F401,I001
from kiln import distributions  # noqa: E402,F401,I001 (after nn: uses kiln.nn.functional)
from kiln._ops_composite_foreach import FUNCTIONS as _FOREACH  # noqa: E402,I001 - torch._foreach_*

globals().update(_FOREACH)
from kiln._legacy_tensors import CONSTRUCTORS as _LEGACY  # noqa: E402,I001 - torch.FloatTensor, ...

globals().update(_LEGACY)
from kiln import jit, profiler, random, testing  # noqa: E402,F401,I001 - torch's small modules
import kiln.autograd.profiler as _autograd_profiler  # noqa: E402,F401,I001
import kiln.nn.attention as _nn_attention  # noqa: E402,F401,I001 (not the nn.modules.attention)
import kiln.optim.swa_utils as _swa_utils  # noqa: E402,F401,I001
import kiln.utils.checkpoint as _checkpoint  # noqa: E402,F401,I001
