//! pfifo_fast-style three-band FIFO: the baseline every benchmark compares against.
