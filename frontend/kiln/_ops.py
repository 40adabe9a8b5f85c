"""kiln.<op> functions: re-exports of the C++ ops plus thin Python argument handling."""

from kiln import _C

add = _C.add
sub = _C.sub
mul = _C.mul
div = _C.div
neg = _C.neg
exp = _C.exp
