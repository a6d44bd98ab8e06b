"""The defaults a rig's steps share with their front ends, in a module that imports nothing.

Why a module of its own: ``rigbench`` builds its ``provision`` commands (and their ``--help``)
from these at start-up, and every other module here imports Fabric, which a command that
never touches a rig should not pay for.
"""

SERVER_PORT = 8080  # llama-server on the rig's 127.0.0.1
CUDA_PACKAGE = "cuda-toolkit-13-1"  # NVIDIA's apt package when the image has no nvcc
