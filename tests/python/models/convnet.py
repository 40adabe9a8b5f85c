"""A small conv net written once against the torch API: ``build(torch, nn, F)`` returns it."""


def build(torch, nn, F):
    class ConvNet(nn.Module):
        def __init__(self, in_channels=3, num_classes=10):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(in_channels, 8, kernel_size=3, padding=1),
                nn.BatchNorm2d(8),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 16, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(16),
                nn.ReLU(),
                nn.MaxPool2d(kernel_size=2, stride=2),
            )
            self.pool = nn.AdaptiveAvgPool2d((1, 1))
            self.flatten = nn.Flatten()
            self.classifier = nn.Linear(16, num_classes)

        def forward(self, x):
            x = self.flatten(self.pool(self.features(x)))
            return F.log_softmax(self.classifier(x), dim=1)

    return ConvNet
