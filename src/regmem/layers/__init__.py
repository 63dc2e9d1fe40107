"""Token mixers (nn.Modules) and their building blocks."""

from regmem.layers.attention import AttentionState, KVCache, SoftmaxAttention
from regmem.layers.base import Mixer
from regmem.layers.block_attention import MoBA, MoEAttention
from regmem.layers.conv import ShortConvolution
from regmem.layers.deep_memory import TTTMLP, DeepMemoryMixer, TitansMLP, TTTLinear
from regmem.layers.delta_product import DeltaProduct
from regmem.layers.deltaformer import DeltaFormer, DeltaFormerState
from regmem.layers.deltanet import NLMS, DeltaNet, GatedDeltaNet, Longhorn
from regmem.layers.engine import EngineMixer
from regmem.layers.gla import GLA
from regmem.layers.hla import AHLA, HLA
from regmem.layers.hope import Hope, HopeAttention, HopeState
from regmem.layers.linear_attention import LinearAttention
from regmem.layers.local_linear import LocalLinearAttention
from regmem.layers.lstm import LSTM, LSTMState
from regmem.layers.mamba import Mamba
from regmem.layers.mamba2 import Mamba2
from regmem.layers.memory import MemoryMixer, MemoryState
from regmem.layers.mesa import RLS, Mesa
from regmem.layers.neural_memory import NeuralMemory, NeuralMemoryState
from regmem.layers.norm import GatedRMSNorm, l2_normalize
from regmem.layers.registry import MIXERS, build_mixer, check_builds, how_it_builds, is_mixer_name, named_mixer
from regmem.layers.retnet import RetNet
from regmem.layers.rotary import RotaryEmbedding
from regmem.layers.self_modifying import SelfModifyingTitans
from regmem.layers.titans import TitansLinear

__all__ = [
    "DeltaFormer",
    "DeltaFormerState",
    "AHLA",
    "GLA",
    "HLA",
    "Hope",
    "HopeAttention",
    "HopeState",
    "NLMS",
    "DeltaNet",
    "DeltaProduct",
    "GatedDeltaNet",
    "Longhorn",
    "TitansLinear",
    "TitansMLP",
    "TTTLinear",
    "TTTMLP",
    "DeepMemoryMixer",
    "MIXERS",
    "AttentionState",
    "GatedRMSNorm",
    "KVCache",
    "LinearAttention",
    "LocalLinearAttention",
    "LSTM",
    "LSTMState",
    "Mamba",
    "Mamba2",
    "Mesa",
    "RLS",
    "MemoryMixer",
    "NeuralMemory",
    "NeuralMemoryState",
    "MemoryState",
    "Mixer",
    "MoBA",
    "MoEAttention",
    "RetNet",
    "RotaryEmbedding",
    "SelfModifyingTitans",
    "ShortConvolution",
    "SoftmaxAttention",
    "build_mixer",
    "check_builds",
    "how_it_builds",
    "is_mixer_name",
    "named_mixer",
    "EngineMixer",
    "l2_normalize",
]
