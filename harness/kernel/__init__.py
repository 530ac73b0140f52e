"""Kernels under test: any kernel a run boots instead of the image's own (a Debian
package, a user's tree, a mutant of a filesystem module), cached, with the modules it
needs carried in its initrd. ``store.py`` is the cache and the ``Kernel`` record,
``add.py`` the sources, ``initrd.py`` how the modules reach the guest, ``mutant.py`` the
mutant builds."""
