"""Wire format: encode and decode ``WriteColumnBatchesRequest`` bytes (shared by client and server)."""
