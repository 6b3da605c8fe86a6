"""kubesage.core: the scheduling core every adapter shares."""
