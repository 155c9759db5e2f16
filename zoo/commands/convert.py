"""``zoo convert HF_DIR OUT_DIR``: a Hugging Face ``save_pretrained`` folder (or a GGUF file) -> a
zoo checkpoint."""
import click

from zoo.commands.threads import threads_option


@click.command("convert")
@click.argument("hf_dir", type=click.Path(exists=True))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--attention", default="sdpa", show_default=True,
              help="zoo attention kernel of the converted model (sdpa, eager, ...).")
@click.option("--dtype", default=None, help="Convert the weights (float32, bfloat16, ...); default: as stored.")
@click.option("--no-tokenizer", is_flag=True, help="Do not store HF_DIR/tokenizer.json in the checkpoint.")
@click.option("--certify/--no-certify", default=None,
              help="Also load HF_DIR with transformers, run a probe batch through both models and store "
                   "the parity certificate in the checkpoint (default: when transformers is installed).")
@click.option("--allow-nonfinite", is_flag=True,
              help="Convert tensors holding NaN or infinity instead of refusing them.")
@threads_option
def command(hf_dir, out_dir, attention, dtype, no_tokenizer, certify, allow_nonfinite):
    """Convert HF_DIR (config.json + *.safetensors written by save_pretrained; the supported
    families are listed in docs/CONVERT.md) into a zoo checkpoint in OUT_DIR (model.safetensors + spec.yaml).  Offline; transformers is needed only to certify.  A
    tokenizer.json beside the weights travels inside the checkpoint (model.tokenizer after zoo.load).

    HF_DIR may also be a GGUF file (llama.cpp): its weights are dequantised (to --dtype, default
    float32) and its tokenizer and chat template come along (docs/GGUF_AND_CHAT.md)."""
    import importlib.util

    import zoo
    from zoo.convert import certificate_text, from_pretrained

    from pathlib import Path

    gguf = Path(hf_dir).is_file()
    if gguf:  # a GGUF file: no transformers folder to certify against
        from zoo.convert import from_gguf

        model = from_gguf(hf_dir, attention=attention, dtype=dtype, tokenizer=not no_tokenizer,
                          allow_nonfinite=allow_nonfinite)
    else:
        if certify is None:
            certify = importlib.util.find_spec("transformers") is not None
        model = from_pretrained(hf_dir, attention=attention, dtype=dtype, tokenizer=not no_tokenizer,
                                certify=certify, allow_nonfinite=allow_nonfinite)
    info = model.convert_info
    path = zoo.save(model, out_dir)
    n = sum(p.numel() for p in model.parameters())
    click.echo(f"converted {info['model_type']} ({', '.join(info.get('architectures') or []) or 'model'}) "
               f"-> {path}  [{n:,} parameters, spec {model.spec.name}]")
    if getattr(model, "tokenizer", None) is not None:
        click.echo(f"tokenizer: {'the GGUF tokenizer' if gguf else 'tokenizer.json'} stored in the checkpoint")
    if "quant_types" in info:
        click.echo("dequantised from: " + ", ".join(f"{q} ({n} tensors)" for q, n in info["quant_types"].items()))
    if info["dropped"]:
        click.echo(f"dropped (unused by the outputs): {', '.join(info['dropped'])}")
    parity = info.get("parity")
    if isinstance(parity, str) and not gguf:
        click.echo(parity)
    else:  # the model card's line: the certificate, or where the model came from and that none exists
        click.echo(certificate_text(zoo.read_metadata(path)))
