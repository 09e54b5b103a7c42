#!/bin/sh
# Build a small local sandbox image with no registry: Debian's busybox-static in an empty
# root file system, imported into the local Docker engine. For tests and air-gapped hosts:
#   scripts/sandbox-image.sh [NAME:TAG]        (default ferroclaw-sandbox:busybox)
# then set `[sandbox] image = "ferroclaw-sandbox:busybox"`. Does nothing when it exists.
set -eu
image="${1:-ferroclaw-sandbox:busybox}"
if docker image inspect "$image" >/dev/null 2>&1; then
    echo "sandbox image $image is present"
    exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get download busybox-static >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    apt-get download busybox-static >/dev/null
fi
dpkg-deb -x busybox-static_*.deb extracted
mkdir -p rootfs/bin rootfs/tmp rootfs/workspace rootfs/etc rootfs/proc rootfs/sys rootfs/dev
cp extracted/bin/busybox rootfs/bin/busybox
for applet in $(rootfs/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "rootfs/bin/$applet"
done
echo "root:x:0:0:root:/root:/bin/sh" > rootfs/etc/passwd
echo "nobody:x:65534:65534:nobody:/nonexistent:/bin/sh" >> rootfs/etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' > rootfs/etc/group
chmod 1777 rootfs/tmp
tar -C rootfs -cf rootfs.tar .
docker import -c 'ENV PATH=/bin' -c 'WORKDIR /workspace' rootfs.tar "$image" >/dev/null
echo "built sandbox image $image"
