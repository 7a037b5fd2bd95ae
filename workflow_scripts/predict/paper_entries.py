"""An entry of paper_figures.yaml, as the study on paper and the Brookhaven comparison read it:
its figure, following {ref: a.b.c} to the one it repeats, and where that figure comes from."""


def resolve(doc, entry):
    """The figure an entry is, following {ref: a.b.c} to the one it repeats."""
    while isinstance(entry, dict) and "ref" in entry:
        target = doc
        for key in entry["ref"].split("."):
            target = target[key]
        entry = target
    return entry


def value(doc, entry):
    entry = resolve(doc, entry)
    return entry["value"] if isinstance(entry, dict) else entry


def where(entry):
    """'the study, Fig. 2' for a figure's source; the assumption's source for an assumption."""
    if "seed" in entry:
        refs = [
            f"{k} {entry[k]}" if k != "figure" else str(entry[k]) for k in ("figure", "table", "section") if k in entry
        ]
        return ", ".join([entry["seed"], *refs])
    return f"assumption ({entry.get('source', 'no source')})"
