# Container targets of dlbench. Included by the top-level Makefile; also usable
# alone: make -f containers/images.mk images
#
#   make images                 both images (base image too when BASE_IMAGE is the local one)
#   make base-image             dlbench-base:bookworm from Debian packages (no registry needed)
#   make image-tf / image-torch one image
#   make images-horovod         dlbench-horovod-{openmpi,mpich}: Horovod 0.28.1 for TF + torch
#                               (FROM the torch image; not part of `images`)
#   make image-horovod-openmpi / image-horovod-mpich   one of them
#   make wheelhouse             download all pinned wheels into ./wheelhouse: builds go offline
#   make compose-smoke          a tiny run of both compose services, record checked
#   make containers-ci          what CI runs (containers/ci.sh)
#
# Variables: BASE_IMAGE, CA_CERT (extra CA bundle -> build secret), TF_REQUIREMENT
# (GPU TensorFlow), DLBENCH_TAG (image tag Compose uses), PYTHON, WHEELHOUSE_PYTHON.
# See containers/README.md.

PYTHON ?= python3
BASE_IMAGE ?= python:3.11-slim-bookworm
LOCAL_BASE_IMAGE ?= dlbench-base:bookworm
CA_CERT ?=
TF_REQUIREMENT ?=
WHEELHOUSE_PYTHON ?=
DLBENCH_TAG ?= latest

DLBENCH_CONTAINERS := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
SMOKE_ARGS ?= --model resnet50 --image-size 64 --batch-size 2 --num-warmup-batches 1 --num-batches 2 --json

# The local base is built on demand; any other base must exist or be pullable.
DLBENCH_BASE_DEP := $(if $(filter $(LOCAL_BASE_IMAGE),$(BASE_IMAGE)),base-image)

.PHONY: images base-image image-tf image-torch wheelhouse compose-smoke containers-ci \
        images-horovod image-horovod-openmpi image-horovod-mpich

images: image-tf image-torch

base-image:
	$(DLBENCH_CONTAINERS)/base/build.sh $(LOCAL_BASE_IMAGE)

image-tf: $(DLBENCH_BASE_DEP)
	BASE_IMAGE='$(BASE_IMAGE)' CA_CERT='$(CA_CERT)' TF_REQUIREMENT='$(TF_REQUIREMENT)' \
	  $(DLBENCH_CONTAINERS)/build.sh tf

image-torch: $(DLBENCH_BASE_DEP)
	BASE_IMAGE='$(BASE_IMAGE)' CA_CERT='$(CA_CERT)' $(DLBENCH_CONTAINERS)/build.sh torch

# Horovod images start FROM dlbench-torch:VERSION (shared layers) and add TF.
images-horovod: image-horovod-openmpi image-horovod-mpich

image-horovod-openmpi image-horovod-mpich: image-torch
	BASE_IMAGE='$(BASE_IMAGE)' CA_CERT='$(CA_CERT)' \
	  $(DLBENCH_CONTAINERS)/build.sh $(patsubst image-%,%,$@)

wheelhouse:
	PYTHON='$(PYTHON)' WHEELHOUSE_PYTHON='$(WHEELHOUSE_PYTHON)' $(DLBENCH_CONTAINERS)/wheelhouse.sh

compose-smoke:
	DLBENCH_TAG='$(DLBENCH_TAG)' $(DLBENCH_CONTAINERS)/compose-run.sh tf-bench $(SMOKE_ARGS) \
	  | $(PYTHON) $(DLBENCH_CONTAINERS)/check_record.py tensorflow
	DLBENCH_TAG='$(DLBENCH_TAG)' $(DLBENCH_CONTAINERS)/compose-run.sh torch-bench $(SMOKE_ARGS) \
	  | $(PYTHON) $(DLBENCH_CONTAINERS)/check_record.py torch

containers-ci:
	PYTHON='$(PYTHON)' $(DLBENCH_CONTAINERS)/ci.sh
