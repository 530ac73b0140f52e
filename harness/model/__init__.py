"""The lab's core objects, which the host and the guest share: the ops of a workload
(``ops``), the workload files that spell them (``opfile``), ACE's grammar and its index
space (``ace``, ``acespace``), the op families (``families``), the durability oracle
(``oracle/``; fio's blocks: ``fioverify``), the kernel's words for a failed disk or log
(``kernlog``) and the messages that cross between host and guest (``contract``).

Stdlib only, relative imports only: the host copies this package into the guest beside
``harness/guest/``, whose programs are entry points over it (``record.install_scripts``).
"""
