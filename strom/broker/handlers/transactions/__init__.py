"""Handlers of the transaction APIs: InitProducerId, AddPartitionsToTxn, EndTxn,
transaction markers and the transaction admin APIs."""
