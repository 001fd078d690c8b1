"""Predictions without a device: the memory model, the allocator replay, step time on another card, sharded states, `gcdoctor plan`, model configs and hardware peaks."""
