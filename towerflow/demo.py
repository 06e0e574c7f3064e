"""``towerflow demo`` (and plain ``towerflow``): the device model, briefly.

Lists the devices, then runs SEED_PROGRAMS.md's P4 (two towers summed on
/cpu:0) on logical CPUs with the placement log on. The training main job
(``towerflow train digits``) replaces this as the recipes land.
"""

import sys

import towerflow as tf


def main():
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
    print("Devices:")
    for device in tf.device_lib.list_local_devices():
        print(f"  {device.name}  ({device.device_type})")
    towers = []
    for index in (1, 2):
        with tf.device(f"/cpu:{index}"):
            a = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3])
            b = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2])
            towers.append(tf.matmul(a, b))
    with tf.device("/cpu:0"):
        total = tf.add_n(towers)
    sys.stdout.flush()  # keep the listing above the placement log on a terminal
    with tf.Session(config=tf.ConfigProto(log_device_placement=True)) as sess:
        result = sess.run(total)
    print("Sum of the two towers:")
    print(result)
    return 0
