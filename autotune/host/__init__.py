"""The host: the lock directory and its files, one tuner per device, the
runner stamp."""
