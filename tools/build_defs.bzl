"""Compiler options shared by kiln's C++ targets."""

def kiln_copts():
    return select({
        "//tools:x86_64": ["-march=x86-64-v3"],
        "//conditions:default": [],
    })
