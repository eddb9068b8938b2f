"""One optimization run: its checked config (job), the loop, metrics, the MLflow sink, the local record
(store), the best design, the printed summary, and run/execute (start, resume)."""
