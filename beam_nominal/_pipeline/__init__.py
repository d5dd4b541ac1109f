"""The stream's machinery: columnar buffers, the request packer and the uploader (all private)."""
