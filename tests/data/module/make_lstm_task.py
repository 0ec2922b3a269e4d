#!/usr/bin/env python3
"""Writes tests/data/module/lstm_module.toml: a small KernelBench-style LSTM problem (an op spec v1
cannot say) as a task whose reference is its own PyTorch module (op pytorch_module), traced to
TorchScript with its weights left out, and the problem's ModelNew = Model in
tests/data/module/subs/lstm_module.py. Run with Debian's python3-torch; the output is committed.

    /usr/bin/python3 tests/data/module/make_lstm_task.py"""
import base64
import io
import math
import os

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x, h0, c0):
        out, _ = self.lstm(x, (h0, c0))
        return self.fc(out[:, -1, :])


batch_size, seq, input_size, hidden_size, num_layers, output_size = 8, 12, 32, 48, 2, 16


def get_inputs():
    return [torch.randn(batch_size, seq, input_size),
            torch.randn(num_layers, batch_size, hidden_size),
            torch.randn(num_layers, batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_layers, output_size]
'''

ns = {}
exec(SOURCE, ns)
init = ns["get_init_inputs"]()
model = ns["Model"](*init)
inputs = ns["get_inputs"]()
traced = torch.jit.trace(model, tuple(inputs), check_trace=False)
keys = list(model.state_dict().keys())
held = dict(list(traced.named_parameters()) + list(traced.named_buffers()))
assert sorted(held) == sorted(keys)
for k in keys:  # placeholders: the task's drawn params take their place
    held[k].data = torch.zeros((), dtype=held[k].dtype).expand(held[k].shape)
buf = io.BytesIO()
torch.jit.save(traced, buf)
blob = base64.b64encode(buf.getvalue()).decode()

hidden = init[1]
k_lstm = 1 / math.sqrt(hidden)


def param_decl(key, t):
    name = key.replace(".", "_")
    if key.startswith("lstm."):  # nn.LSTM: every weight U(-1/sqrt(hidden), 1/sqrt(hidden))
        return name, f'init = "uniform"\nscale = {2 * k_lstm!r}\nshift = {-k_lstm!r}'
    if key == "fc.weight":
        return name, 'init = "kaiming_uniform"'
    return name, 'init = "bias_uniform"\nof = "fc_weight"'


names = [d.replace(".", "_") for d in keys]
out_shape = list(model(*inputs).shape)
lines = ['# written by tests/data/module/make_lstm_task.py: an LSTM (no spec v1 op) whose reference',
         '# is its own PyTorch module', 'name = "lstm_module"', "level = 3", 'dtype = "float32"',
         'outputs = ["y"]', ""]
for n, x in zip(["x", "h0", "c0"], inputs):
    lines += ["[[inputs]]", f'name = "{n}"', f"shape = {list(x.shape)}", 'init = "normal"', ""]
for key, n in zip(keys, names):
    _, decl = param_decl(key, model.state_dict()[key])
    lines += ["[[params]]", f'name = "{n}"', f"shape = {list(model.state_dict()[key].shape)}", decl,
              ""]
lines += ["[[ops]]", 'out = "y"', 'op = "pytorch_module"',
          "args = [" + ", ".join(f'"{a}"' for a in ["x", "h0", "c0"] + names) + "]",
          f'attrs = {{ inputs = 3, state_dict = "{" ".join(keys)}", output = 0, '
          f'shape = {out_shape}, torchscript = "{blob}" }}', ""]
sd = ", ".join(f'{n} = "{k}"' for n, k in zip(names, keys))
lines += ["[kernelbench]", "source = '''\n" + SOURCE + "'''", f"init_inputs = {init}",
          'forward = [{ input = "x" }, { input = "h0" }, { input = "c0" }]', "bool_inputs = []",
          f"state_dict = {{ {sd} }}", "model_keys = [" + ", ".join(f'"{k}"' for k in keys) + "]",
          ""]
with open(os.path.join(HERE, "lstm_module.toml"), "w") as f:
    f.write("\n".join(lines))
os.makedirs(os.path.join(HERE, "subs"), exist_ok=True)
with open(os.path.join(HERE, "subs", "lstm_module.py"), "w") as f:
    f.write("# ModelNew = the problem's Model: what the reference computes, in PyTorch\n" +
            SOURCE.replace("class Model(", "class ModelNew("))
print(f"lstm_module.toml: {len(blob)} base64 characters of TorchScript, output {out_shape}")
