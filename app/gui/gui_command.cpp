// `attnscope gui`: placeholder until the GUI issue lands; the target proves the Qt build works.
