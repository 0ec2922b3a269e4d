# Hand-written for tests/tools/test_kernelbench_import.py (KernelBench format, not from KernelBench):
# torch.nn modules with non-default attributes, one mapping rule each.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=3, stride=2, padding=1, dilation=1, groups=2)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.2)
        self.act = nn.LeakyReLU(0.2)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.gn = nn.GroupNorm(2, cout, eps=1e-4)
        self.tanh = nn.Hardtanh(-0.5, 0.5)
        self.up = nn.ConvTranspose2d(cout, cin, kernel_size=3, stride=2, padding=1,
                                     output_padding=1, bias=False)
        self.inorm = nn.InstanceNorm2d(cin, affine=True)
        self.avg = nn.AvgPool2d(2)
        self.relu6 = nn.ReLU6()
        self.gap = nn.AdaptiveAvgPool2d((1, 1))
        self.flat = nn.Flatten()
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(cin, 6)
        self.ln = nn.LayerNorm(6)
        self.gelu = nn.GELU(approximate="tanh")
        self.elu = nn.ELU(alpha=0.5)
        self.softplus = nn.Softplus(beta=2, threshold=10)
        self.ident = nn.Identity()
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        x = self.pool(self.act(self.bn(self.conv(x))))
        x = self.tanh(self.gn(x))
        x = self.avg(self.relu6(self.inorm(self.up(x))))
        x = self.drop(self.flat(self.gap(x)))
        x = self.gelu(self.ln(self.fc(x)))
        return self.softmax(self.ident(self.softplus(self.elu(x))))


batch_size = 4
cin, cout = 4, 8


def get_inputs():
    return [torch.randn(batch_size, cin, 16, 16)]


def get_init_inputs():
    return [cin, cout]
