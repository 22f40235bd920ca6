"""Whole projects: a training step spread over several modules, rewritten as one program.

    outline (ast, cheap)  -> which named files call into which project modules (`layout`,
                             `outline`): the import graph, resolved statically, never by
                             importing, over the modules that may step, save or
                             pass on an optimizer
    link (libcst)         -> the groups of modules one training step spans, the functions
                             that receive the grad scaler as a new parameter and the call
                             sites that pass it (`links`)
    rewrite               -> every module of a group through the engine with its links,
                             all or nothing (`rewrite`)

A named file that no other project module is linked with goes through the single-file path
unchanged.
"""
