"""PyTorch backend: torchvision models, SGD with momentum, optional autocast."""

from __future__ import annotations

import contextlib
import datetime
import itertools
import sys
from pathlib import Path
from typing import Iterator

import torch
import torchvision
from PIL import Image

from ..data.dataset import IMAGE_EXTENSIONS, list_classes, list_images
from ..distributed.cluster import torch_init_method
from ..measure import compilation, precision, step_timing, timing
from ..tta import lr_rules
from . import gemm
from .base import AUX_LOSS_WEIGHT, AllocatorPeaks, DeviceInfo, Framework, checksum, has_aux_head, looks_like_oom

TORCHVISION_NAMES = {"inception3": "inception_v3"}  # the other --model names are torchvision's own


DATALOADER_PREFETCH = 2  # torch.utils.data.DataLoader's prefetch_factor, left at its default
MAX_CONSECUTIVE_BAD = 100  # undecodable images in a row before the data dir is taken as broken


class FlatImageFolder(torchvision.datasets.ImageFolder):
    """DIR/<class>/<image>, listed as the pre-run scan and the TensorFlow path list it: torchvision's
    own listing recurses into class directories following symlinks, so a link back up
    (`cls0/up -> ..`) made it endless, and it counted hidden directories as classes."""

    def find_classes(self, directory):
        classes = list_classes(Path(directory))
        return classes, {name: index for index, name in enumerate(classes)}

    @staticmethod
    def make_dataset(directory, class_to_idx, extensions=None, is_valid_file=None, allow_empty=False):
        return [(str(image), index) for name, index in class_to_idx.items()
                for image in list_images(Path(directory) / name) if is_valid_file is None or is_valid_file(str(image))]


class SkippingImageFolder(torch.utils.data.Dataset):
    """An ImageFolder whose undecodable images are skipped (the next one is taken) and reported:
    each sample carries the (path, why) of the images skipped to reach it, so the counts leave
    the DataLoader's worker processes with the batch (collate_skipping)."""

    def __init__(self, folder, strict: bool):
        self.folder, self.strict = folder, strict

    def __len__(self) -> int:
        return len(self.folder)

    def __getitem__(self, index: int):
        skipped = []
        for attempt in range(MAX_CONSECUTIVE_BAD):
            i = (index + attempt) % len(self.folder)
            try:
                image, label = self.folder[i]
                return image, label, skipped
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:  # PIL: truncated, corrupt, huge
                path = self.folder.samples[i][0]
                if self.strict:
                    raise ValueError(f"--strict-data: {path}: cannot be decoded ({type(error).__name__}: {error})") from None
                skipped.append((path, f"cannot be decoded ({type(error).__name__}: {str(error)[:200]})"))
        raise ValueError(f"{MAX_CONSECUTIVE_BAD} images in a row cannot be decoded (first: {skipped[0][0]}: {skipped[0][1]})")


def collate_skipping(samples):
    images, labels = torch.utils.data.default_collate([(image, label) for image, label, _ in samples])
    return images, labels, [item for _, _, skipped in samples for item in skipped]


class SmallCNN(torch.nn.Sequential):
    """benchmarks/tta/smallcnn.py's network, with its seeded initial weights."""

    def __init__(self, image_size: int, num_classes: int, seed: int):
        from ..tta import smallcnn as spec

        c1, c2 = spec.CHANNELS
        nn = torch.nn

        def block(c_in, c_out):
            return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                    nn.BatchNorm2d(c_out, eps=spec.BN_EPSILON, momentum=spec.BN_MOMENTUM), nn.ReLU(), nn.MaxPool2d(2)]

        side = spec.feature_size(image_size)
        super().__init__(*block(3, c1), *block(c1, c2), nn.Flatten(),
                         nn.Linear(c2 * side * side, spec.HIDDEN), nn.ReLU(), nn.Linear(spec.HIDDEN, num_classes))
        weights = spec.initial_weights(seed, image_size, num_classes)
        conv1, bn1, _, _, conv2, bn2, _, _, _, fc1, _, fc2 = self
        with torch.no_grad():
            for conv, bn, name in ((conv1, bn1, "1"), (conv2, bn2, "2")):
                conv.weight.copy_(torch.from_numpy(weights["conv" + name].transpose(3, 2, 0, 1).copy()))
                bn.weight.copy_(torch.from_numpy(weights[f"bn{name}_gamma"]))
                bn.bias.copy_(torch.from_numpy(weights[f"bn{name}_beta"]))
            for fc, name in ((fc1, "fc1"), (fc2, "fc2")):
                fc.weight.copy_(torch.from_numpy(weights[name].T.copy()))
                fc.bias.copy_(torch.from_numpy(weights[name + "_bias"]))


def build_model(model: str, num_classes: int, aux_head: bool, image_size: int = 224, seed: int = 0) -> torch.nn.Module:
    if model == "smallcnn":
        return SmallCNN(image_size, num_classes, seed)
    builder = getattr(torchvision.models, TORCHVISION_NAMES.get(model, model))
    kwargs = {"weights": None, "num_classes": num_classes}
    if model == "inception3":
        kwargs.update(aux_logits=aux_head, init_weights=False)
    return builder(**kwargs)


def training_loss(output, labels, aux_head: bool) -> torch.Tensor:
    """Cross-entropy; with InceptionV3's auxiliary head, plus its own weighted by AUX_LOSS_WEIGHT."""
    cross_entropy = torch.nn.functional.cross_entropy
    if not aux_head:
        return cross_entropy(output, labels)
    return cross_entropy(output.logits, labels) + AUX_LOSS_WEIGHT * cross_entropy(output.aux_logits, labels)


FLOP_COUNT_BATCH = 2  # batch norm in training mode needs more than one value per channel


def count_flops(model: str, image_size: int, num_classes: int, aux_head: bool):
    """Forward, and forward + backward, FLOPs per image of one training step on meta tensors:
    shapes only, no memory and no compute, so any model and size counts in a second or two."""
    from torch.utils.flop_counter import FlopCounterMode

    from ..measure.flops import Counted

    with torch.device("meta"):
        net = build_model(model, num_classes, aux_head, image_size).train()
        images = torch.empty(FLOP_COUNT_BATCH, 3, image_size, image_size)
        labels = torch.zeros(FLOP_COUNT_BATCH, dtype=torch.long)
    with FlopCounterMode(display=False) as forward:
        net(images)
    with FlopCounterMode(display=False) as step:
        training_loss(net(images), labels, aux_head).backward()
    return Counted(forward.get_total_flops() / FLOP_COUNT_BATCH, step.get_total_flops() / FLOP_COUNT_BATCH,
                   "torch.utils.flop_counter.FlopCounterMode on meta tensors (convolutions and matrix products)")


class TorchFramework(Framework):
    name = "torch"

    def version(self) -> str:
        return torch.__version__

    def setup(self) -> None:
        cfg = self.config
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        torch.manual_seed(cfg.seed)
        self.device = self._pick_device(cfg.device)
        self.memory_format = (
            torch.channels_last if cfg.data_format == "channels_last" else torch.contiguous_format
        )
        self.aux_head = has_aux_head(cfg.model, cfg.image_size)
        # this rank's own network; self.model is what trains it: wrapped (DDP), compiled (--compile)
        self.replica = build_model(cfg.model, cfg.num_classes, self.aux_head, cfg.image_size, cfg.seed)
        self.model = self.replica.to(self.device, memory_format=self.memory_format).train()
        self.optimizer = self.new_optimizer()
        self._init_distributed()
        self.eager_model = self.model
        if cfg.compile:
            self.model = compilation.torch_compile(self.model, cfg.compile)
        plan = precision.plan(cfg.precision, "gpu" if self.device.type == "cuda" else "cpu")
        self.precision_state = precision.apply_torch(plan, self.device)
        self.new_step_event, self.step_timing_state = step_timing.apply_torch(cfg.step_timing, self.device)
        self.amp_dtype = precision.torch_dtype(plan)
        self.scaler = torch.amp.GradScaler("cuda", enabled=plan.loss_scaling)

    def compute_threads(self) -> int | None:
        return self.config.num_threads or torch.get_num_threads()

    def visible_gpus(self) -> int | None:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def shared_memory_for_data(self) -> int:
        """--data-dir: each DataLoader worker keeps prefetch_factor (2, torch's default) float32 batches in
        flight, handed over through /dev/shm."""
        cfg = self.config
        if not cfg.data_dir:
            return 0
        return cfg.num_data_workers * DATALOADER_PREFETCH * cfg.batch_size * 3 * cfg.image_size ** 2 * 4

    def _pick_device(self, wanted: str) -> torch.device:
        from ..core.errors import UsageError

        has_gpu = torch.cuda.is_available()
        if wanted == "gpu" and not has_gpu:
            raise UsageError("--device gpu but torch sees no CUDA device (choices here: auto, cpu)")
        if wanted == "cpu" or not has_gpu:
            return torch.device("cpu")
        torch.cuda.set_device(self.gpu_ordinal(torch.cuda.device_count()))
        return torch.device("cuda", torch.cuda.current_device())

    def new_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=self.config.base_lr, momentum=0.9)

    def _init_distributed(self) -> None:
        """Join the other ranks' gradient exchange (the strategy's subclass below); alone: nothing."""

    def parameter_checksum(self) -> str:
        return checksum(parameter.detach().float().cpu().numpy() for parameter in self.replica.parameters())

    def count_flops(self):
        return count_flops(self.config.model, self.config.image_size, self.config.num_classes, self.aux_head)

    def gemm_factory(self, math: str):
        return gemm.torch_factory(self.device, math)

    def model_info(self) -> dict:
        return {
            "parameters": sum(p.numel() for p in self.replica.parameters() if p.requires_grad),
            "aux_head": self.aux_head,
        }

    def device_info(self) -> DeviceInfo:
        from ..results.provenance import cpu_model

        gpu = self.device.type == "cuda"
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        return DeviceInfo(
            kind="gpu" if gpu else "cpu",
            name=torch.cuda.get_device_name(self.device) if gpu else cpu_model(),
            count=1,
            cuda_version=torch.version.cuda,
            cudnn_version=str(cudnn) if cudnn else None,
            visible_gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0,
            ordinals=(self.device.index,) if gpu else (),
            intra_op_threads=torch.get_num_threads(),
        )

    def _to_device(self, images: torch.Tensor, labels: torch.Tensor):
        images = images.to(self.device, non_blocking=True).contiguous(memory_format=self.memory_format)
        return images, labels.to(self.device, non_blocking=True)

    def synthetic_batches(self) -> list:
        cfg = self.config
        generator = torch.Generator().manual_seed(cfg.seed + self.dist.world.rank)  # each rank its own data
        shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
        return [
            self._to_device(
                torch.randn(shape, generator=generator),
                torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=generator),
            )
            for _ in range(cfg.synthetic_batches)
        ]

    def real_batches(self) -> Iterator:
        from torchvision import transforms

        cfg = self.config
        pipeline = transforms.Compose(
            [
                transforms.RandomResizedCrop(cfg.image_size),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
            ]
        )
        skip = self.skip_images
        folder = FlatImageFolder(
            cfg.data_dir, transform=pipeline,
            is_valid_file=lambda path: path.lower().endswith(IMAGE_EXTENSIONS) and path not in skip,
        )
        dataset = SkippingImageFolder(folder, self.strict_data)
        world = self.dist.world
        sampler = None
        if world.size > 1:  # each rank reads its own shard, as a real multi-worker job does
            sampler = torch.utils.data.DistributedSampler(dataset, world.size, world.rank, seed=cfg.seed)
        self.loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=cfg.batch_size,
            shuffle=sampler is None,
            sampler=sampler,
            drop_last=len(dataset) >= cfg.batch_size,
            num_workers=cfg.num_data_workers,
            pin_memory=self.device.type == "cuda",
            persistent_workers=cfg.num_data_workers > 0,
            generator=torch.Generator().manual_seed(cfg.seed),
            collate_fn=collate_skipping,
        )
        epochs = itertools.chain.from_iterable(itertools.repeat(self.loader))
        for images, labels, skipped in epochs:
            self.decode_failures.extend(skipped)
            yield self._to_device(images, labels)

    def train_step(self, batch):
        images, labels = batch
        self.model.zero_grad(set_to_none=True)  # Horovod's optimizer wrapper lacks set_to_none
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            loss = training_loss(self.model(images), labels, self.aux_head)
        self.scaler.scale(loss).backward()
        if self.uses_lars:
            with self._gradients_final():
                self.scaler.unscale_(self.optimizer)
                self._apply_lars()
                self.scaler.step(self.optimizer)
        else:
            self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def _gradients_final(self) -> contextlib.AbstractContextManager:
        """Gradients are averaged over ranks on entry (DDP: during backward); the step inside uses them."""
        return contextlib.nullcontext()

    def _apply_lars(self) -> None:
        lr = self.optimizer.param_groups[0]["lr"]
        with torch.no_grad():
            for parameter in self.optimizer.param_groups[0]["params"]:
                if parameter.grad is not None and lr_rules.lars_applies(parameter.shape):
                    parameter.grad.mul_(lr_rules.lars_factor(
                        parameter.norm(), parameter.grad.norm(), lr, lambda a, b: torch.clamp(a, max=b), torch.where))

    # -- time to accuracy ------------------------------------------------------------------------

    def labelled_batch(self, images, labels):
        return self._to_device(torch.from_numpy(images).permute(0, 3, 1, 2), torch.from_numpy(labels))

    def evaluate(self, batch) -> tuple[int, float]:
        images, labels = batch
        model = self.replica  # no DDP wrapper: evaluation is this rank's own
        model.eval()
        try:
            with torch.no_grad(), torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
                logits = model(images).float()
                loss = torch.nn.functional.cross_entropy(logits, labels, reduction="sum")
                correct = (logits.argmax(dim=1) == labels).sum()
        finally:
            model.train()
        return int(correct.item()), float(loss.item())

    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    @property
    def compiles(self) -> bool:
        return self.config.compile is not None

    def compile_step(self, batches) -> None:
        """torch.compile compiles at the first call; if that fails (no C compiler, an unsupported
        op), train eager instead and say so rather than stop the run."""
        compilation.dynamo_reset_counters()
        start = timing.clock()
        try:
            seconds, fell_back, reason = self.timed_loop(batches, 1).wall_time_s, False, None
        except Exception as error:  # any compiler failure; OOM is still an OOM
            if self.is_out_of_memory(error):
                raise
            lines = [line for line in str(error).splitlines() if line.strip()]
            reason = f"{type(error).__name__}: {lines[0][:300] if lines else ''}"
            print(f"bench: torch.compile failed, training eager: {reason}", file=sys.stderr, flush=True)
            self.model, fell_back = self.eager_model, True
            self.model.zero_grad(set_to_none=True)
            self.timed_loop(batches, 1)
            seconds = timing.clock() - start
        breaks, graphs = compilation.dynamo_counts()
        self.compile_state = compilation.section(self.config.compile, "inductor", seconds, fell_back, reason,
                                                 breaks, graphs)

    def record_sections(self) -> dict:
        if self.compile_state is not None and not self.compile_state["fell_back_to_eager"]:
            self.compile_state["graphs_at_end"] = compilation.dynamo_counts()[1]  # more: it recompiled later
        return super().record_sections()

    trace_suffix = ".pt.trace.json"  # HTA's and TensorBoard's name for torch.profiler traces

    def profile_steps(self, batches, num_steps: int, path) -> None:
        from torch.profiler import ProfilerActivity, profile, record_function

        from ..measure.trace import annotation

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        with profile(activities=activities) as profiler:
            # synchronised every step whatever --step-timing: each marked step spans its device work
            self.timed_loop(batches, num_steps, annotate=lambda kind, index: record_function(annotation(kind, index)),
                            new_event=None)
        profiler.export_chrome_trace(str(path))

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def loss_value(self, loss) -> float:
        return float(loss.float().item())

    def is_out_of_memory(self, error: BaseException) -> bool:
        return (isinstance(error, (torch.cuda.OutOfMemoryError, MemoryError)) or looks_like_oom(str(error))
                or self._onednn_out_of_address_space(error))

    @staticmethod
    def _onednn_out_of_address_space(error: BaseException) -> bool:
        """oneDNN reports a failed allocation only as "could not create a primitive"; near the
        `ulimit -v` limit that is an out-of-memory (the supervisor's rule for native crashes)."""
        from ..measure.memory import AS_LIMIT_NEAR, near_address_space_limit

        return "could not create a primitive" in str(error) and near_address_space_limit(AS_LIMIT_NEAR) is not None

    def reset_peak_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory(self) -> AllocatorPeaks:
        if self.device.type != "cuda":
            return AllocatorPeaks()
        return AllocatorPeaks(
            allocated=torch.cuda.max_memory_allocated(self.device),
            reserved=torch.cuda.max_memory_reserved(self.device),
        )

    def close(self) -> None:
        loader = getattr(self, "loader", None)
        if loader is not None and getattr(loader, "_iterator", None) is not None:
            # torch has no public call that stops a DataLoader's workers now rather than when it is collected
            loader._iterator._shutdown_workers()  # noqa: SLF001 - see the line above
        self._close_distributed()

    def _close_distributed(self) -> None:
        """Leave the gradient exchange (subclasses)."""


class TorchDdpFramework(TorchFramework):
    """--strategy ddp."""

    def _init_distributed(self) -> None:
        self.join_process_group()
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        self.model = torch.nn.parallel.DistributedDataParallel(self.replica, device_ids=device_ids)

    def collective_library(self, gpu: bool) -> str | None:
        return "nccl" if gpu else "gloo"

    def collective(self) -> tuple[str | None, str | None]:
        import torch.distributed as dist

        backend = str(dist.get_backend()) if dist.is_initialized() else None
        return backend, backend

    def join_process_group(self) -> None:
        """torch.distributed's group of every rank: NCCL on GPU, gloo on CPU."""
        import torch.distributed as dist

        cfg, world = self.config, self.dist.world
        dist.init_process_group(
            self.collective_library(self.device.type == "cuda"),
            init_method=torch_init_method(self.dist.coordinator, cfg.rendezvous_port),
            rank=world.rank,
            world_size=world.size,
            timeout=datetime.timedelta(seconds=cfg.rendezvous_timeout),
        )

    def _close_distributed(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class TorchHorovodFramework(TorchFramework):
    """--strategy horovod."""

    def _init_distributed(self) -> None:
        import horovod.torch as hvd

        hvd.init()
        self.optimizer = hvd.DistributedOptimizer(self.optimizer, named_parameters=self.model.named_parameters())
        hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(self.optimizer, root_rank=0)

    def collective_library(self, gpu: bool) -> str | None:
        import horovod.torch as hvd

        from ..distributed.strategies.horovod import collective

        return collective(hvd, gpu, initialised=False)[0]

    def collective(self) -> tuple[str | None, str | None]:
        import horovod.torch as hvd

        from ..distributed.strategies.horovod import collective

        return collective(hvd, self.device.type == "cuda")

    def _gradients_final(self) -> contextlib.AbstractContextManager:
        """Horovod averages in optimizer.step(); LARS needs the average first."""
        self.optimizer.synchronize()
        return self.optimizer.skip_synchronize()

    def _close_distributed(self) -> None:
        import horovod.torch as hvd

        hvd.shutdown()  # finalizes MPI: mpirun fails a rank that exits without it
