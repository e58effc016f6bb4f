"""Suite files written for a test (``--suite`` and the suite loader take a suite JSON's path)."""

import json


def write_suite(path, layers) -> str:
    """A suite file at ``path`` (``--suite`` takes a suite JSON's path) of ``layers``: (name, in channels, out
    channels, square input size, square filter size, padding) each, stride 1; returns the path as a string."""
    def layer(name, c, k, size, f, pad):
        return {"name": name, "in_channels": c, "out_channels": k, "input_size": [size, size],
                "filter_size": [f, f], "stride": [1, 1], "padding": [[pad, pad], [pad, pad]], "dilation": [1, 1],
                "groups": 1, "bias": False, "count": 1}

    path.write_text(json.dumps({"name": path.stem, "description": "test", "source": "", "default_batch": 2,
                                "layers": [layer(*spec) for spec in layers]}))
    return str(path)
