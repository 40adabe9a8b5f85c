"""torchvision's ResNet and MobileNetV2, written once against the torch API (``m`` is ``torch`` or
``kiln``) with torchvision's structure: BasicBlock/Bottleneck with ``ReLU(inplace=True)`` and
``out += identity``, MobileNetV2's inverted residuals with ReLU6 and depthwise 3x3 convolutions,
``torch.flatten`` before the classifier. Used by bench/models.py."""


def resnet(m, layers=(2, 2, 2, 2), bottleneck=False, classes=1000):
    """ResNet-18 (``layers=(2, 2, 2, 2)``) or, with ``bottleneck``, ResNet-50 (3, 4, 6, 3)."""
    nn = m.nn

    def conv3x3(cin, cout, stride=1):
        return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)

    def conv1x1(cin, cout, stride=1):
        return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, cin, width, stride=1, downsample=None):
            super().__init__()
            self.conv1, self.bn1 = conv3x3(cin, width, stride), nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.conv2, self.bn2 = conv3x3(width, width), nn.BatchNorm2d(width)
            self.downsample = downsample

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            return self.relu(out)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, width, stride=1, downsample=None):
            super().__init__()
            self.conv1, self.bn1 = conv1x1(cin, width), nn.BatchNorm2d(width)
            self.conv2, self.bn2 = conv3x3(width, width, stride), nn.BatchNorm2d(width)
            self.conv3 = conv1x1(width, width * self.expansion)
            self.bn3 = nn.BatchNorm2d(width * self.expansion)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            return self.relu(out)

    block = Bottleneck if bottleneck else BasicBlock

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(64, layers[0])
            self.layer2 = self._make_layer(128, layers[1], stride=2)
            self.layer3 = self._make_layer(256, layers[2], stride=2)
            self.layer4 = self._make_layer(512, layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * block.expansion, classes)

        def _make_layer(self, width, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != width * block.expansion:
                downsample = nn.Sequential(conv1x1(self.inplanes, width * block.expansion, stride),
                                           nn.BatchNorm2d(width * block.expansion))
            layers_ = [block(self.inplanes, width, stride, downsample)]
            self.inplanes = width * block.expansion
            layers_ += [block(self.inplanes, width) for _ in range(1, blocks)]
            return nn.Sequential(*layers_)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            x = m.flatten(self.avgpool(x), 1)
            return self.fc(x)

    return ResNet()


def mobilenet_v2(m, classes=1000):
    """torchvision's MobileNetV2 (width 1.0): inverted residual settings t, c, n, s."""
    nn = m.nn

    def conv_bn(cin, cout, kernel=3, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups,
                            bias=False), nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6(inplace=True))
        return nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            self.use_res_connect = stride == 1 and cin == cout
            layers = [conv_bn(cin, hidden, 1)] if expand != 1 else []
            layers += [conv_bn(hidden, hidden, stride=stride, groups=hidden),
                       conv_bn(hidden, cout, 1, act=False)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            if self.use_res_connect:
                return x + self.conv(x)
            return self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                        (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
            features = [conv_bn(3, 32, stride=2)]
            cin = 32
            for t, c, n, s in settings:
                for i in range(n):
                    features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            features.append(conv_bn(cin, 1280, 1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

        def forward(self, x):
            x = self.features(x)
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
            return self.classifier(m.flatten(x, 1))

    return MobileNetV2()
