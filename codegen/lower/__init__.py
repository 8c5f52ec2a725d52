"""Lowering of tegrad programs to the loop IR (:func:`.program.lower_program`)."""
