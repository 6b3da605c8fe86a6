"""Configuration shipped with kubesage (installed as ``kubesage.configs``): read it through
:func:`kubesage.core.paths.shipped_file`, never by path from the source tree."""
