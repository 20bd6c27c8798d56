"""The demo node processes the cluster tests drive (see ``minihermes.cluster.process``)."""

from minihermes.cluster.process import NodeProcess as NodeProc

__all__ = ["NodeProc"]
