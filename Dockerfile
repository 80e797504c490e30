# CUDA image for training on NVIDIA GPUs.
#   docker build -t ssl_app .
#   docker run --gpus all --shm-size=8g -v $PWD/runs:/app/runs -v $PWD/data:/app/data ssl_app \
#       fit --config configs/cifar10/memory_bank.yaml --config configs/losses/table1/infonce_t0.3.yaml \
#       --data.init_args.download=true --trainer.accelerator=gpu --trainer.devices=1
# (one column of Table 1 on CIFAR-10, downloaded to the mounted data/ on first use; tests/test_docs.py
# checks that this line parses). Without arguments the image runs the quickstart on the GPU.
# The PyTorch base image brings a CUDA build of torch/torchvision; pip keeps them.
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY ssl_app ssl_app
COPY datamodules datamodules
COPY callbacks callbacks
RUN pip install --no-cache-dir .
COPY configs configs

ENTRYPOINT ["python", "-m", "ssl_app"]
CMD ["fit", "--config", "configs/quickstart.yaml", "--trainer.accelerator=gpu"]
