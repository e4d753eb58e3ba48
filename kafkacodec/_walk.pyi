# The batch walker (kafkacodec/_walk.pxd) is C-level only: nothing Python-visible.
