# The Debian package (CPack's DEB generator): what `cmake --install` puts where, and the
# package's control data. Included by the top-level CMakeLists.txt once the `tessera` target
# exists; packaging/README.md says how to build it (cpack --preset release) and what it holds.
#
# Every install rule of the project is here: the binary, the systemd units, the env files the
# units read (conffiles), the Python SDK the workers import, and docs/deploy.md.

include(GNUInstallDirs)

set(TESSERA_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR})

install(TARGETS tessera RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# /usr/lib/systemd/system: where systemd looks for a package's units on a merged-/usr system
# (Debian 12 and later, Ubuntu 22.04 and later).
install(FILES ${TESSERA_PACKAGING_DIR}/systemd/tessera-head.service
              ${TESSERA_PACKAGING_DIR}/systemd/tessera-agent.service
              ${TESSERA_PACKAGING_DIR}/systemd/tessera-router.service
        DESTINATION lib/systemd/system)
# Absolute: /etc, whatever the prefix. No secrets go in them (the tokens are files of their
# own), so they are readable by all like the units that name them.
set(TESSERA_ENV_FILES head.env agent.env router.env)
foreach(env_file IN LISTS TESSERA_ENV_FILES)
  install(FILES ${TESSERA_PACKAGING_DIR}/etc/${env_file} DESTINATION /etc/tessera)
endforeach()
# The worker SDK (tessera.worker, checkpoint, data, client; standard library only), where
# Debian's python3 finds it without PYTHONPATH; also the agent's --warm-sdk-dir.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/tessera
        DESTINATION lib/python3/dist-packages
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
install(FILES ${PROJECT_SOURCE_DIR}/docs/deploy.md ${PROJECT_SOURCE_DIR}/docs/discovery.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# dpkg keeps an edited conffile across upgrades (and asks before replacing it).
set(TESSERA_CONFFILES ${PROJECT_BINARY_DIR}/packaging/conffiles)
list(TRANSFORM TESSERA_ENV_FILES PREPEND /etc/tessera/ OUTPUT_VARIABLE conffile_paths)
list(JOIN conffile_paths "\n" conffile_text)
file(WRITE ${TESSERA_CONFFILES} "${conffile_text}\n")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tessera)
set(CPACK_PACKAGE_VENDOR "tessera")
# The Maintainer field; a site building its own package sets its own:
# cmake --preset release -DCPACK_PACKAGE_CONTACT="Name <address>".
if(NOT CPACK_PACKAGE_CONTACT)
  set(CPACK_PACKAGE_CONTACT "tessera maintainers <tessera@localhost>")
endif()
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "control plane for TPU and GPU accelerator slices")
set(CPACK_PACKAGE_DESCRIPTION
    "A head (API server, controller, SQLite or etcd store), a host agent that discovers TPU VMs "
    "and NVIDIA GPUs and runs workers, and a serving router, in one binary, with systemd units "
    "for each: tessera-head, tessera-agent, tessera-router.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # tessera_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
# The shared libraries' packages (yaml-cpp, SQLite, OpenSSL, expat...) from dpkg-shlibdeps,
# which reads the binary's NEEDED entries: dpkg-dev must be installed where cpack runs.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# passwd: useradd and groupadd in postinst. python3: the SDK and the example workers.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "passwd")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "etcd-server")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${TESSERA_PACKAGING_DIR}/debian/postinst ${TESSERA_PACKAGING_DIR}/debian/prerm
    ${TESSERA_PACKAGING_DIR}/debian/postrm ${TESSERA_CONFFILES})
# Control files with the modes Debian's policy gives them (scripts 0755, conffiles 0644),
# whatever the checkout's umask made of them.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
set(CPACK_STRIP_FILES ON)
# The package holds only what the install rules above put there (no build tree, no source).
set(CPACK_SOURCE_GENERATOR "")
include(CPack)

# The package's test (packaging/test_package.sh): cpack over this build tree (its binary as it
# is, no second build), unpacked into a scratch root, its files, modes, conffiles and units
# checked, and `systemd-analyze verify` where it is installed.
add_test(NAME package_deb
         COMMAND bash ${TESSERA_PACKAGING_DIR}/test_package.sh ${PROJECT_BINARY_DIR})
set_tests_properties(package_deb PROPERTIES LABELS package TIMEOUT 120)
