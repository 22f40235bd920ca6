"""The dtype model: what torch does with each op under autocast (`ops`), and the views of it
each precision question reads (`views`)."""
